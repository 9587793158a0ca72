"""The Piper engine: VITS voices (espeak-ng phonemes) from the piper-tts project, served as one graph or in
two stages. How an engine package is laid out and how to add one: ``pipeline/voices/__init__.py``.

* ``graph.py``: the graph's tensor names, ``frame_lengths`` exposed for exact batching, the whole-graph run.
* ``split.py``: the graph split at the decoder's input into an acoustic stage and a vocoder.
* ``voice.py``: ``PiperConfig`` (phonemizer, scales) and ``PiperVoice``, the whole graph (``engine = "piper"``).
* ``iobinding.py``: the whole graph on CUDA through IO binding.
* ``stages.py``: the two-stage Piper voice (``engine = "twostage"``, ``source = "piper"``), and the split
  build serving runs on first use.
"""
