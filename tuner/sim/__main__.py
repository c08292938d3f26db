"""`python -m tuner.sim ...`: a simulated `python -m sglang.launch_server ...`."""

from __future__ import annotations

from ._main import main

main()
