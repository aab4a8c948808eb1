"""The loop's one clock (seconds, monotonic). Tests replace `now` with a simulated clock that the
fake models advance by their modelled costs, so the draft controller is tested deterministically."""

from __future__ import annotations

import time

now = time.perf_counter
