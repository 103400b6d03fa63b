"""Single import point for the TFLite flatbuffer schema: the object API generated in ``ai_edge_litert``.

Everything that reads or writes .tflite structure goes through ``S`` so the schema version is the one the runtime
(ai-edge-litert 2.3.0) was built with.
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as S

__all__ = ["S"]
