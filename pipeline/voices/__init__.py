"""Voices: text of one language run -> phoneme ids -> ONNX model stages -> audio. One package per engine.

Engine-neutral modules (what every engine is built on):

* ``base.py``: the ``Voice`` protocol the worker batches through, ``SynthesisOptions``, ``Phonemized``.
* ``runtime.py``: the one place sessions are made (``SessionFactory``), lazy sessions, ``StageSession``.
* ``stages.py``, ``twostage.py``: an acoustic stage and a vocoder with typed outputs, and ``TwoStageVoice``
  over any pair of them (``OnnxAcoustic``/``OnnxVocoder`` for graphs that take a padded batch).
* ``windows.py``: windowed vocoding (streaming from inside a sentence).
* ``gpu.py``, ``binding.py``: IO binding on CUDA (reused pinned host buffers, rounded shapes).
* ``prepared.py``: the prepared folder of a voice in the model cache (the ``Preparer`` contract, the atomic
  write, the reading at serving time, the recorded gates).
* ``bank.py``: the voices of one process: routing, building (``_build``), loading once, warm-up.

An engine package (``piper/``, ``zhtts/``, ``kokoro/``) holds everything that knows the engine's graphs: its
voice or stage classes, its phonemizer, its tensor names, the graph surgery that establishes them and the
checks the surgery must pass. Nothing outside ``pipeline/voices/`` names an engine's tensors: preparation
(``pipeline/prepare/``) and the worker go through the engine's functions and the ``Voice`` protocol.

Adding an engine ``E``:

1. ``pipeline/voices/E/__init__.py`` (a docstring saying what the engine is) and its modules, importing only
   ``pipeline.errors``, ``pipeline.settings``, ``pipeline/text/`` (a phonemizer others could use belongs
   there) and the engine-neutral modules here. Either

   * one graph: a class meeting ``base.Voice`` (``phonemize``, ``synthesize_batch``, ``name``,
     ``languages``, ``sample_rate``, ``max_batch``), built on ``runtime.LazySession`` so the bank can load,
     warm and describe it (``kokoro/voice.py`` is the shortest example); register it in ``bank._build``
     under ``engine = "E"``; or
   * two stages: stage classes meeting ``stages.AcousticStage``/``VocoderStage`` (or ``OnnxAcoustic``/
     ``OnnxVocoder`` with the graph's names), each on a ``StageSession``, and a builder
     ``build_E_two_stage(spec, factory) -> TwoStageVoice`` that reads the prepared folder
     (``read_prepared(prepared_dir(...))``, ``Prepared.served(stage, wanted_precision(...))``); register it in
     ``twostage.STAGE_BUILDERS["E"] = "pipeline.voices.E.stages:build_E_two_stage"`` (``zhtts/stages.py``
     is the example). A cheap, tool-free build may be run by serving on first use: give the builder a
     ``prepared.Preparer(..., on_first_use=True)`` for its FP32 stages and call ``prepare_on_first_use``
     (``piper/stages.py``); otherwise ``require_prepared`` names the command to run.

2. Its preparer, ``pipeline/prepare/E.py``: ``E = Preparer(sources=..., build=..., version=...)`` (the
   contract is ``prepared.Preparer``'s docstring: input files, what ``build`` writes into its work folder,
   one verdict per stage and precision), using the engine's graph functions and the gates of
   ``pipeline/prepare/`` (``quantize``, ``fp16``, ``listening``); add it to
   ``pipeline/prepare/registry.py: PREPARERS["E"]``. Bump ``version`` whenever what ``build`` writes
   changes: it is part of the folder's fingerprint.

3. A catalogue entry in ``configs/voices.toml``: ``engine = "E"`` (one graph), or ``engine = "twostage"``,
   ``source = "E"``, ``acoustic = "prepared"``, ``vocoder = "prepared"``; ``model`` its source model, and
   ``languages``, ``sample_rate``, ``license``. Then `ttsfarm voices prepare NAME` and `ttsfarm voices NAME`.

4. Tests: the engine's own (``tests/test_zhtts_voice.py`` is the pattern: batch equals solo, lengths exact,
   a recognizer round trip), and the package in ``pyproject.toml``'s ``[tool.setuptools] packages``.
"""
