"""The Kokoro engine: Kokoro-82M as one INT8 graph, speaking Mandarin through its phoneme vocabulary. How an
engine package is laid out and how to add one: ``pipeline/voices/__init__.py``.

* ``voice.py``: ``KokoroVoice`` (``engine = "kokoro"``), one style of the model per catalogue voice.
"""
