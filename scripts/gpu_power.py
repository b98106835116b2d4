#!/usr/bin/env python3
"""The GPU's SM clock and power draw while some work runs (development tool).

`Sampler` runs `nvidia-smi` in the background, sampling every 50 ms, and
summarises what it saw: the SM clock's median and minimum, the median power
draw, and whether the driver lowered the clocks for power (the software
power cap, reason 0x4) or heat. affine_kernels.py and wave_kernel.py use it
under --power, to show which kernels the 700 W cap slows down:

    with Sampler() as s:
        ...   # at least a second of work
    print(s.summary())
"""
import subprocess
import threading

QUERY = "clocks.sm,power.draw,clocks_event_reasons.active"
# clocks_event_reasons bits (nvidia-smi --help-query-gpu)
REASONS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "thermal (software)", 0x40: "thermal (hardware)",
           0x80: "power brake"}


class Sampler:
    """Samples the SM clock (MHz), the power draw (W) and the clock-event
    reasons of GPU 0 while the `with` block runs."""

    def __init__(self, interval_ms: int = 50):
        self.interval_ms = interval_ms
        self.rows = []
        self.error = ""

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                          "-lms", str(self.interval_ms)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
        except OSError as e:
            self.proc, self.error = None, f"nvidia-smi: {e}"
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3:
                continue
            try:
                self.rows.append((float(parts[0]), float(parts[1]), int(parts[2], 16)))
            except ValueError:
                continue

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(timeout=2)
        return False

    def summary(self) -> str:
        """"sm 1830 MHz (min 1395), 635 W, power cap", or why there is nothing."""
        if self.error:
            return self.error
        rows = self.rows[2:-1]   # the first samples may predate the work, the last postdate it
        if not rows:
            return "no samples"
        clocks = sorted(r[0] for r in rows)
        power = sorted(r[1] for r in rows)
        seen = 0
        for r in rows:
            seen |= r[2]
        why = [name for bit, name in REASONS.items() if seen & bit]
        return (f"sm {clocks[len(clocks) // 2]:.0f} MHz (min {clocks[0]:.0f}), {power[len(power) // 2]:.0f} W"
                + (", " + ", ".join(why) if why else ""))
