"""Winograd F(2x2/4x4/6x6, 3x3) convolution: transforms, cost model, planner, graph rewrite, tables.

Modules by role: ``transforms`` (exact Cook-Toom/Lavin matrices), ``reference`` (numpy convs + fp32 error
bound), ``convspec`` (conv record + suitability), ``buffers`` (our kernels' buffer sizes / FLOPs), ``cost``
(device profiles + roofline model), ``plan`` (per-conv decisions, table, manifest JSON), ``apply``
(graph IR: plan + rewrite CONV_2D -> SdConv2DWinograd), ``tune`` (measure candidates through the delegate),
``sd_shapes`` (SD1.x conv shapes from the config), ``report``/``accuracy`` (paper table, error report),
``codegen`` (C++ matrices). Import the submodule you need; this package imports nothing on its own.
"""
