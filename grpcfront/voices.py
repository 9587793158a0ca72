"""``GetRivaSynthesisConfig``: the farm's voices as Riva model configs.

One config per catalogue voice and language. Its parameters are the ones Riva's clients read (``talk.py
--list-voices`` prints ``voice_name + "." + subvoice`` for each of ``subvoices``): ``language_code`` (``en-US``),
``voice_name`` (the Riva prefix, ``English-US``), ``subvoices`` (the subvoice part of each alias that reads with this
voice, then the voice's own name: ``Male-1:0,joe:1``; every ``prefix.subvoice`` listed is a name a request may send),
and ours: ``ttsfarm_voice`` (the name a request may send as ``voice_name`` too),
``sample_rate_hz`` (the voice's own rate), ``engine``.
"""

from __future__ import annotations

from typing import Any

from riva.client.proto import riva_tts_pb2

from pipeline.errors import UNKNOWN_VOICE, InputError
from grpcfront.asks import LANGUAGE_TAGS, RIVA_PREFIXES
from wire.settings import GrpcSettings, Settings


def model_configs(settings: Settings, front: GrpcSettings, model_name: str = "") -> Any:
    """The ``RivaSynthesisConfigResponse`` for every voice, or for ``model_name`` alone (a voice of ours)."""
    catalogue = settings.catalogue
    wanted = model_name.strip()
    if wanted and wanted not in catalogue.voices:
        raise InputError(f"model_name: unknown model {wanted[:64]!r}; models: {', '.join(sorted(catalogue.voices))}",
                         code=UNKNOWN_VOICE)
    reply = riva_tts_pb2.RivaSynthesisConfigResponse()
    for spec in catalogue.voices.values():
        if wanted and spec.name != wanted:
            continue
        for language in spec.languages:
            prefix = RIVA_PREFIXES.get(language, language)
            subvoices = [alias.split(".", 1)[1] for alias, target in sorted(front.voice_aliases.items())
                         if "." in alias and alias.split(".", 1)[0].lower() == prefix.lower()
                         and (target or catalogue.default_voice) == spec.name] + [spec.name]
            config = reply.model_config.add()
            config.model_name = spec.name
            config.parameters.update({
                "language_code": LANGUAGE_TAGS.get(language, language),
                "voice_name": prefix,
                "subvoices": ",".join(f"{sub}:{i}" for i, sub in enumerate(subvoices)),
                "ttsfarm_voice": spec.name,
                "sample_rate_hz": str(spec.sample_rate),
                "engine": spec.engine,
                "default": str(spec.name == catalogue.default_voice).lower(),
            })
    return reply
