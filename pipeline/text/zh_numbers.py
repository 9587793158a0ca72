"""Mandarin text normalization: written numbers, dates, times, money and units as read aloud.

``normalize_zh`` rewrites every digit sequence in a Chinese run into Han characters, so the
G2P step downstream only ever sees characters it can look up. Rules run in a fixed order,
most specific first (a date before a range, a range before a bare number), and each rule
writes Han characters, so a later rule never sees the digits an earlier one consumed.

Choices, applied consistently:

* money with decimals is read as a decimal: ``12.50元`` -> ``十二点五元`` (trailing zeros dropped);
* a four-digit number before 年 is a year, read digit by digit: ``2024年`` -> ``二零二四年``;
* phone-like strings are read digit by digit with 1 as 幺: ``13800138000`` -> ``幺三八零零幺三八零零零``;
* the number 2 before a measure word or unit is 两: ``2个`` -> ``两个``, ``2km`` -> ``两公里``.

cn2an is not used: its ``an2cn`` transform reads times, dashes, phone numbers, money symbols
and units wrongly (``10:30`` -> ``十:三十``, ``3-5`` -> ``三负五``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

logger = logging.getLogger(__name__)

__all__ = ["cardinal", "digits", "normalize_zh"]

_DIGITS = "零一二三四五六七八九"
_PHONE_DIGITS = "零幺二三四五六七八九"
_MAX_CARDINAL = 10**16

_INT = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"
_NUM = rf"(?:{_INT})(?:\.\d+)?"
_RANGE_DASH = r"\s?[-~～–—]\s?"
_QTY = rf"(?P<a>{_NUM})(?:{_RANGE_DASH}(?P<b>{_NUM}))?"
_NO_ALNUM_BEFORE = r"(?<![0-9A-Za-z.])"

_CURRENCY_SYMBOLS = {"¥": "元", "￥": "元", "$": "美元", "€": "欧元", "£": "英镑"}
_CURRENCY_WORDS = ("美元", "欧元", "英镑", "日元", "港元", "港币", "元", "块")

# Latin unit -> Han reading. Matched case-sensitively and only when no Latin letter follows.
_UNITS: dict[str, str] = {
    "km/h": "公里每小时", "m/s": "米每秒", "km²": "平方公里", "m²": "平方米", "㎡": "平方米",
    "m³": "立方米", "km": "公里", "KM": "公里", "cm": "厘米", "mm": "毫米", "nm": "纳米",
    "m": "米", "kg": "千克", "KG": "千克", "Kg": "千克", "mg": "毫克", "g": "克",
    "ml": "毫升", "mL": "毫升", "L": "升", "h": "小时", "min": "分钟", "ms": "毫秒", "s": "秒",
    "KB": "千字节", "MB": "兆字节", "GB": "吉字节", "TB": "太字节",
    "kHz": "千赫兹", "MHz": "兆赫兹", "GHz": "吉赫兹", "Hz": "赫兹",
    "kWh": "千瓦时", "kW": "千瓦", "mAh": "毫安时",
}
_UNIT_PATTERN = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))

_TEMPERATURES = {"℃": "摄氏度", "°C": "摄氏度", "℉": "华氏度", "°F": "华氏度", "°": "度", "度": "度"}

# After these, a bare 2 is read 两 (两个, 两天, 两万); 第2 stays 第二.
_LIANG_BEFORE = frozenset(
    "个位只本次条张件天年种把家辆块元份双对名人句岁倍层部台架棵匹头场周页杯碗瓶斤米克秒"
    "样类组节门所间座栋幅首篇封支根片颗粒道项遍趟口声步排套批群艘届季点万千百亿"
)
_LIANG_BEFORE_WORDS = ("小时", "分钟", "公里", "公斤", "千克", "星期", "礼拜", "美元", "欧元")

_FULLWIDTH = str.maketrans("０１２３４５６７８９％＄", "0123456789%$")


def cardinal(n: int) -> str:
    """Read a non-negative integer as a Mandarin cardinal: 12345 -> 一万二千三百四十五."""
    if n < 0:
        return "负" + cardinal(-n)
    if n >= _MAX_CARDINAL:
        return digits(str(n))
    if n == 0:
        return "零"
    text = _sections(n)
    return text[1:] if text.startswith("一十") else text


def _sections(n: int) -> str:
    """Cardinal without the leading 一十 -> 十 contraction; n in 1..10**16-1."""
    yi, wan, low = n // 10**8, n // 10**4 % 10**4, n % 10**4
    parts: list[str] = []
    if yi:
        parts.append(_sections(yi) + "亿")
    for value, suffix in ((wan, "万"), (low, "")):
        if not value:
            continue
        if parts and value < 1000:
            parts.append("零")
        parts.append(_below_10000(value) + suffix)
    return "".join(parts)


def _below_10000(n: int) -> str:
    out: list[str] = []
    pending_zero = False
    for place, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit = n // place % 10
        if digit == 0:
            pending_zero = bool(out)
            continue
        if pending_zero:
            out.append("零")
            pending_zero = False
        out.append(_DIGITS[digit] + unit)
    return "".join(out)


def digits(text: str, *, phone: bool = False) -> str:
    """Read a digit string one digit at a time; ``phone`` reads 1 as 幺."""
    table = _PHONE_DIGITS if phone else _DIGITS
    return "".join(table[int(c)] for c in text if c.isdigit())


def _decimal(text: str) -> str:
    """Read '3.14' as 三点一四, '12' as 十二."""
    whole, _, frac = text.replace(",", "").partition(".")
    spoken = cardinal(int(whole)) if len(whole) < 17 else digits(whole)
    return spoken + ("点" + digits(frac) if frac else "")


def _count(text: str, *, liang: bool) -> str:
    """A quantity; when ``liang`` (a measure word or unit follows), 2 is read 两."""
    return "两" if liang and text == "2" else _decimal(text)


def _takes_liang(following: str) -> bool:
    return bool(following) and (
        following[0] in _LIANG_BEFORE or following.startswith(_LIANG_BEFORE_WORDS)
    )


def _quantity(match: re.Match[str], read: Callable[[str], str], joiner: str = "到") -> str:
    """Read group 'a', and group 'b' as the end of a range when present."""
    first = read(match["a"])
    return first + joiner + read(match["b"]) if match["b"] else first


# --- rule handlers: each takes a match and returns Han text -------------------------------


def _full_date(m: re.Match[str]) -> str:
    year, month, day = m["y"], int(m["mo"]), int(m["d"])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m[0]
    return f"{digits(year)}年{cardinal(month)}月{cardinal(day)}日"


def _year_month(m: re.Match[str]) -> str:
    return f"{digits(m['y'])}年{cardinal(int(m['mo']))}月"


def _year(m: re.Match[str]) -> str:
    return digits(m["y"]) + "年"


def _year_range(m: re.Match[str]) -> str:
    return f"{digits(m['a'])}到{digits(m['b'])}年"


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m["h"]), int(m["mi"])
    second = int(m["s"]) if m["s"] else 0
    if hour > 24 or minute > 59 or second > 59:
        return _ratio(m)
    spoken = ("两" if hour == 2 else cardinal(hour)) + "点"
    if minute or second:
        spoken += ("零" if minute < 10 else "") + cardinal(minute) + "分"
    if second:
        spoken += cardinal(second) + "秒"
    return spoken


def _ratio(m: re.Match[str]) -> str:
    return "比".join(cardinal(int(part)) for part in m[0].split(":"))


def _percent(m: re.Match[str]) -> str:
    sign = "负" if m["neg"] else ""
    return sign + "百分之" + _quantity(m, _decimal)


def _currency_symbol(m: re.Match[str]) -> str:
    return _quantity(m, _money_count) + _CURRENCY_SYMBOLS[m["sym"]]


def _currency_word(m: re.Match[str]) -> str:
    return _quantity(m, _money_count) + m["cur"]


def _money_count(text: str) -> str:
    """A money amount: decimals without trailing zeros (12.50 -> 十二点五, 12.00 -> 十二)."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return _count(text, liang=True)


def _temperature(m: re.Match[str]) -> str:
    below = "零下" if m["neg"] else ""
    return below + _quantity(m, _decimal) + _TEMPERATURES[m["unit"]]


def _unit(m: re.Match[str]) -> str:
    return _quantity(m, lambda a: _count(a, liang=True)) + _UNITS[m["unit"]]


def _fraction(m: re.Match[str]) -> str:
    numerator, denominator = int(m["n"]), int(m["d"])
    if denominator == 0:
        return m[0]
    sign = "负" if m["neg"] else ""
    return f"{sign}{cardinal(denominator)}分之{cardinal(numerator)}"


def _phone(m: re.Match[str]) -> str:
    return " ".join(digits(group, phone=True) for group in m[0].split("-"))


def _range(m: re.Match[str]) -> str:
    liang = _takes_liang(m.string[m.end() :])
    return _quantity(m, lambda a: _count(a, liang=liang))


def _negative(m: re.Match[str]) -> str:
    return "负" + _decimal(m["a"])


def _number(m: re.Match[str]) -> str:
    whole, frac = m["int"], m["frac"]
    if frac is not None:
        return _decimal(m[0])
    counted = _takes_liang(m.string[m.end() :])  # 12345678人 is a count, not a phone number
    if _is_code(whole) and not counted:
        return digits(whole, phone=True)
    after_di = m.start() > 0 and m.string[m.start() - 1] == "第"
    return _count(whole, liang=counted and not after_di)


def _is_code(whole: str) -> bool:
    """Phone numbers, ids and zero-padded codes are read digit by digit; round numbers are not."""
    if "," in whole:
        return False
    if len(whole) > 1 and whole.startswith("0"):
        return True
    return len(whole) >= 7 and len(whole.rstrip("0")) > 2


_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]

_DATE = r"(?<!\d)(?P<y>\d{4})(?P<sep>[-/.])(?P<mo>\d{1,2})(?P=sep)(?P<d>\d{1,2})(?![\d.])"
_YEAR_MONTH = r"(?<![\d-])(?P<y>\d{4})-(?P<mo>0[1-9])(?![\d-])"
_YEAR_RANGE = rf"(?<!\d)(?P<a>\d{{4}}){_RANGE_DASH}(?P<b>\d{{4}})年"
_YEAR = r"(?<!\d)(?P<y>\d{4})年"
_TIME = r"(?<![\d:])(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2}))?(?![\d:])"
_RATIO = r"(?<![\d:])\d+(?::\d+)+(?![\d:])"
_PERCENT = rf"{_NO_ALNUM_BEFORE}(?P<neg>-)?(?P<a>{_NUM})%?(?:{_RANGE_DASH}(?P<b>{_NUM}))?%"
_MONEY_BEFORE = rf"(?P<sym>[¥￥$€£])\s?{_QTY}"
_MONEY_AFTER = rf"{_QTY}\s?(?P<cur>{'|'.join(_CURRENCY_WORDS)})"
_TEMPERATURE = rf"{_NO_ALNUM_BEFORE}(?P<neg>-)?{_QTY}\s?(?P<unit>℃|°C|℉|°F|°|度)"
_UNIT = rf"{_QTY}\s?(?P<unit>{_UNIT_PATTERN})(?![A-Za-z])"
_FRACTION = rf"{_NO_ALNUM_BEFORE}(?P<neg>-)?(?<![\d/])(?P<n>\d+)/(?P<d>\d+)(?![\d/])"
# Landline with area code, mobile in 3-4-4 groups, 400/800 service numbers.
_PHONE = r"(?<![\d-])(?:0\d{2,3}-\d{7,8}|1\d{2}-\d{4}-\d{4}|[48]00-\d{3}-\d{4})(?![\d-])"
_RANGE = rf"(?<![\d.])(?P<a>{_NUM}){_RANGE_DASH}(?P<b>{_NUM})"
_NEGATIVE = rf"{_NO_ALNUM_BEFORE}-(?P<a>{_NUM})"
_NUMBER = rf"(?P<int>{_INT})(?:\.(?P<frac>\d+))?"

# Most specific first: each rule writes Han text, so later rules never see its digits.
_RULES: list[_Rule] = [
    (re.compile(pattern), handler)
    for pattern, handler in (
        (_DATE, _full_date),
        (_YEAR_MONTH, _year_month),
        (_YEAR_RANGE, _year_range),
        (_YEAR, _year),
        (_TIME, _time),
        (_RATIO, _ratio),
        (_PERCENT, _percent),
        (_MONEY_BEFORE, _currency_symbol),
        (_MONEY_AFTER, _currency_word),
        (_TEMPERATURE, _temperature),
        (_UNIT, _unit),
        (_FRACTION, _fraction),
        (_PHONE, _phone),
        (_RANGE, _range),
        (_NEGATIVE, _negative),
        (_NUMBER, _number),
    )
]


def _fold(text: str) -> str:
    """Full-width digits, and signs between digits, to ASCII."""
    text = text.translate(_FULLWIDTH)
    text = re.sub(r"(?<=\d)[：:](?=\d)", ":", text)
    text = re.sub(r"(?<=\d)[．](?=\d)", ".", text)
    text = re.sub(r"(?<=\d)[／](?=\d)", "/", text)
    text = re.sub(r"(?<=\d)[－−](?=\d)", "-", text)
    return re.sub(r"[－−](?=\d)", "-", text)


def normalize_zh(text: str) -> str:
    """Rewrite written numbers in a Chinese run as the Han characters a reader says."""
    if not any(c.isdigit() for c in text):
        return text
    text = _fold(text)
    for pattern, handler in _RULES:
        text = pattern.sub(handler, text)
    logger.debug("normalized zh: %s", text)
    return text
