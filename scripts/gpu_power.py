#!/usr/bin/env python3
"""The GPU's SM clock and power draw while some work runs (development tool).

`Sampler` runs `nvidia-smi` in the background, sampling every 50 ms, and
summarises what it saw: the SM clock's median and minimum, the median power
draw, and whether the driver lowered the clocks for power (the software
power cap, reason 0x4) or heat. affine_kernels.py and wave_kernel.py use it
under --power, to show which kernels the 700 W cap slows down:

    with Sampler(device_id(torch)) as s:
        ...   # at least a second of work
    print(s.summary())

The power is `power.draw.instant` where the driver has it, else
`power.draw`, which on Hopper is a one-second average and so lags the work.
"""
import subprocess
import threading

FIELDS = ("clocks.sm", "{power}", "clocks_event_reasons.active")
POWER_FIELDS = ("power.draw.instant", "power.draw")   # the first the driver knows
# clocks_event_reasons bits (nvidia-smi --help-query-gpu)
REASONS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "thermal (software)", 0x40: "thermal (hardware)",
           0x80: "power brake"}


_power_fields = {}   # device: the power field its nvidia-smi knows, or why none


def power_field(device: str) -> str:
    """The first of POWER_FIELDS that nvidia-smi answers for device (asked
    once per device), or "nvidia-smi ..." saying why none."""
    if device not in _power_fields:
        why = ""
        for field in POWER_FIELDS:
            try:
                r = subprocess.run(["nvidia-smi", "-i", device, f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as e:
                why = f"nvidia-smi: {e}"
                break
            if r.returncode == 0:
                _power_fields[device] = field
                return field
            why = f"nvidia-smi exited {r.returncode}: {(r.stdout + r.stderr).strip()[:200]}"
        _power_fields[device] = why
    return _power_fields[device]


def device_id(torch) -> str:
    """nvidia-smi's name for the CUDA device torch uses (its UUID): nvidia-smi
    numbers GPUs in PCI order, CUDA by speed unless CUDA_DEVICE_ORDER says
    otherwise, and CUDA_VISIBLE_DEVICES renumbers them again."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else "0"


class Sampler:
    """Samples the SM clock (MHz), the power draw (W) and the clock-event
    reasons of one GPU (nvidia-smi's -i: an index, a UUID or a PCI bus id)
    while the `with` block runs."""

    def __init__(self, device: str = "0", interval_ms: int = 50):
        self.device, self.interval_ms = device, interval_ms
        self.rows = []
        self.error = ""
        self.power_field = ""
        self.proc = None
        self.thread = None

    def __enter__(self):
        field = power_field(self.device)
        if field.startswith("nvidia-smi"):
            self.error = field
            return self
        query = ",".join(FIELDS).format(power=field)
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", self.device, f"--query-gpu={query}",
                                          "--format=csv,noheader,nounits", "-lms", str(self.interval_ms)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            self.error = f"nvidia-smi: {e}"
            return self
        self.power_field = field
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
            if self.proc.poll() is not None and self.proc.returncode != 0:
                self.error = f"nvidia-smi exited {self.proc.returncode}: {self.proc.stderr.read().strip()[:200]}"
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
        kind = " (1 s average)" if self.power_field == "power.draw" else ""
        return (f"sm {clocks[len(clocks) // 2]:.0f} MHz (min {clocks[0]:.0f}), {power[len(power) // 2]:.0f} W{kind}"
                + (", " + ", ".join(why) if why else ""))
