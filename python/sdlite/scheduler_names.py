"""The schedulers' names, without numpy: the command-line parser reads them before anything heavy is imported, so
``sdlite generate`` can start making the GPU device (sdlite/early_device.py) before numpy's import. The registry,
sdlite.schedulers.SCHEDULERS, has the same names in the same order (tests/sdlite/test_schedulers.py)."""

SCHEDULER_NAMES = ("pndm", "ddim", "euler_a", "dpmpp_2m", "dpmpp_2m_karras")
