"""`ttsfarm voices`: every catalogue voice with what this install really serves, read from the cache.

Per voice: engine, languages, license, and per stage the model file and the precision served (the
decision serving makes from the prepared verdicts), with the quality-gate figures recorded at
preparation: the spectral distance of INT8 against FP32, the split check, and a recognizer round trip
(WER/CER) when the preparer recorded one. Nothing is loaded here, and nothing is built but the
lengths graph of a whole-graph Piper voice (``prepare_piper_graph``, as serving it would).
"""

from __future__ import annotations

import json
from typing import Any

from pipeline.errors import TTSFarmError
from pipeline.settings import PipelineSettings, VoiceSpec
from pipeline.voices.prepared import prepared_dir, read_prepared, source_fingerprint, wanted_precision


def _prepared(spec: VoiceSpec, settings: PipelineSettings) -> tuple[Any, str]:
    from pipeline.prepare.registry import preparer_for

    try:
        preparer = preparer_for(spec)
        fingerprint = source_fingerprint(preparer.sources(spec), preparer.version)
        prepared = read_prepared(prepared_dir(settings.runtime.cache_dir, spec.name, fingerprint), verify=False)
    except TTSFarmError as exc:
        return None, str(exc)
    return prepared, "" if prepared else f"not prepared (run `ttsfarm voices prepare {spec.name}`)"


def _figures(verdict: dict[str, Any] | None) -> dict[str, Any]:
    if not verdict:
        return {}
    out: dict[str, Any] = {}
    for key in ("spectral", "recognizer"):
        if verdict.get(key):
            out[key] = verdict[key]
    if verdict.get("split_check"):
        out["split_max_abs_diff"] = verdict["split_check"].get("max_abs_diff_vs_whole")
    return out


def describe_voice(spec: VoiceSpec, settings: PipelineSettings) -> dict[str, Any]:
    row: dict[str, Any] = {"name": spec.name, "engine": spec.engine, "languages": list(spec.languages), "license": spec.license}
    if spec.options.get("user"):
        row["user"] = True  # added by `ttsfarm voices add`: listed in runtime.user_dir's voices.toml
    if spec.options.get("speaker"):
        row["speaker"] = str(spec.options["speaker"])
    if spec.engine == "blend":
        from pipeline.voices.bank import gated_choice, held_back

        cache, catalogue = settings.runtime.cache_dir, settings.catalogue
        row["routes"] = dict(spec.options.get("routes", {}))
        row["routed"] = {lang: gated_choice(choices, cache, catalogue) for lang, choices in row["routes"].items()}
        held = {name: held_back(name, cache, catalogue) for choices in row["routes"].values()  # the last one always serves
                for name in ([] if isinstance(choices, str) else choices[:-1])}
        row["held_back"] = {name: why for name, why in held.items() if why}
        return row
    prepared, note = _prepared(spec, settings)
    row["prepared"] = str(prepared.folder) if prepared else None
    if note:
        row["note"] = note
    stages: dict[str, Any] = {}
    if spec.engine == "twostage":
        for stage in ("acoustic", "vocoder"):
            location = getattr(spec, stage) or "prepared"
            if location != "prepared" or prepared is None:
                stages[stage] = {"model": location, "precision": "fp32" if location != "prepared" else None}
                continue
            path, precision, why = prepared.served(stage, wanted_precision(spec, settings.runtime, stage))
            stages[stage] = {"model": path.name, "precision": precision, "why": why,
                             "gate": {p: _figures(prepared.verdict(stage, p)) for p in ("fp32", "fp16", "int8") if _figures(prepared.verdict(stage, p))}}
    else:
        verdict = prepared.verdict("model", spec.precision) if prepared else None
        file = prepared.stage_file("model", spec.precision) if prepared else None
        stages["model"] = {"model": file.name if file else spec.model if len(spec.model) < 60 else spec.model[:57] + "...",
                           "precision": spec.precision, "why": (verdict or {}).get("reason", "")}
        if spec.engine == "piper":
            from pipeline.voices.piper.voice import choose_model
            from pipeline.voices.piper.graph import prepare_piper_graph
            from pipeline.voices.runtime import resolve_resource

            model, precision = choose_model(prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir).path, spec, settings.runtime)
            stages["model"].update(model=model.name, precision=precision, why="`ttsfarm quantize` report")
    row["stages"] = stages
    natural = [v["naturalness"] for v in (prepared.verdicts.values() if prepared else []) if v.get("naturalness")]
    if natural:
        row["naturalness"] = natural[0]  # one figure a voice: the audio of the stages it serves
    return row


def describe_catalogue(settings: PipelineSettings) -> list[dict[str, Any]]:
    return [describe_voice(spec, settings) for spec in settings.catalogue.voices.values()]


def _figure_text(gate: dict[str, Any]) -> str:
    parts = []
    for precision, figures in gate.items():
        spectral, recognizer = figures.get("spectral"), figures.get("recognizer")
        if figures.get("split_max_abs_diff") is not None:
            parts.append(f"{precision}: equals whole graph (max abs diff {figures['split_max_abs_diff']:.2g})")
        if spectral:
            parts.append(f"{precision}: log-mel L1 {spectral['value']:.2f} dB (ceiling {spectral['ceiling']}, "
                         f"{'passed' if spectral['passed'] else 'failed'})")
        if recognizer:
            parts.append(f"{precision}: {recognizer['metric'].upper()} {100 * recognizer['value']:.1f} % "
                         f"(ceiling {100 * recognizer['ceiling']:.1f} %, {'passed' if recognizer['passed'] else 'failed'})")
    return "; ".join(parts)


def format_voices(rows: list[dict[str, Any]], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps(rows, indent=2, ensure_ascii=False)
    lines = []
    for row in rows:
        head = f"{row['name']}  [{row['engine']}]  languages {', '.join(row['languages'])}"
        head += (f"  speaker {row['speaker']}" if row.get("speaker") else "") + ("  (user's own)" if row.get("user") else "")
        lines.append(head)
        if row.get("routes"):
            lines.append("  routes    " + ", ".join(f"{lang} -> {row['routed'][lang]}" + (f" (of {' | '.join(voices)})" if isinstance(voices, list) else "")
                                               for lang, voices in row["routes"].items()))
            for name, why in (row.get("held_back") or {}).items():
                lines.append(f"  held back {name}: {why}")
        if row.get("license"):
            lines.append(f"  license   {row['license']}")
        if row.get("note"):
            lines.append(f"  note      {row['note']}")
        if row.get("naturalness"):
            n = row["naturalness"]
            lines.append(f"  natural   DNSMOS P.808 {n['value']:.2f} (floor {n['floor']:.2f}, {'passed' if n['passed'] else 'FAILED'}); "
                         f"P.835 sig {n['p835']['sig']:.2f} bak {n['p835']['bak']:.2f} ovrl {n['p835']['ovrl']:.2f}")
        for stage, info in (row.get("stages") or {}).items():
            lines.append(f"  {stage:9s} {info['model']}  {info['precision'] or '-'}" + (f"  ({info['why']})" if info.get("why") else ""))
            figures = _figure_text(info.get("gate") or {})
            if figures:
                lines.append(f"  {'':9s} gate: {figures}")
    return "\n".join(lines)


def list_voices(settings: PipelineSettings, names: list[str], *, as_json: bool = False) -> str:
    """`ttsfarm voices [list] [NAME...]`: the catalogue (or those voices) with what this install serves.
    An unknown name is UNKNOWN_VOICE."""
    for name in names:
        settings.catalogue.get(name)
    return format_voices([r for r in describe_catalogue(settings) if not names or r["name"] in names], as_json=as_json)
