#!/usr/bin/env python3
"""Summarises e2e.sh's choice mode log: one line per shape with the served
kernel time per launch and the launch call's host time (from the /metrics
counters' differences between shapes, the first request's included), the
client's p50 over the 200 requests, the variant the first request ran and
the variants that answered the 200.

usage: choice_summary.py LOG [LABEL]"""
import json
import re
import sys


def trials(line, outcome):
    m = re.search(r'mfmad_gemm_choice_trials_total\{outcome="' + outcome + r'"\} (\S+)', line)
    return m.group(1) if m else "?"


def main():
    label = sys.argv[2] if len(sys.argv) > 2 else ""
    prev = (0.0, 0.0, 0.0)
    cur = None
    for line in open(sys.argv[1], errors="replace"):
        if line.startswith("E2E choice"):
            m = re.match(r'E2E choice f16 (\w+) (\S+): first "variant": "([^"]+)".*?\| loop (\{.*)', line)
            if not m:
                continue
            sp, shape, var, js = m.groups()
            try:
                j = json.loads(js)
                p50 = j["latency_ns"]["p50"] / 1e3
                ran = ",".join(f"{k}:{v}" for k, v in j.get("variants", {}).items())
            except (ValueError, KeyError):
                p50, ran = float("nan"), "?"
            cur = (sp, shape, var, p50, ran)
        elif line.startswith(("E2E metrics", "E2E mark")):
            def val(name):
                m = re.search(name + r'(?:\{device="0"\})? (\S+)', line)
                return float(m.group(1)) if m else 0.0
            now = (val("mfmad_gemm_executions_total"), val("mfmad_device_kernel_seconds_total"),
                   val("mfmad_device_launch_seconds_total"))
            if line.startswith("E2E mark") or not cur:
                prev = now  # the loop's counters start here
                continue
            n = now[0] - prev[0]
            if n > 0:
                sp, shape, var, p50, ran = cur
                print(f"CHOICE {label} {sp:6} {shape:15} kernel {(now[1] - prev[1]) / n * 1e6:6.1f} "
                      f"launch {(now[2] - prev[2]) / n * 1e6:5.1f} us/launch, client p50 {p50:7.1f} us; "
                      f"first {var}; loop ran {ran}; trials {trials(line, 'kept')}/{trials(line, 'changed')} kept/changed")
            prev = now
            cur = None


if __name__ == "__main__":
    main()
