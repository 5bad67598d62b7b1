"""Runs FD.io's MLRsearch (PyPI MLRsearch 1.2.1) on the simulated devices of mlrref.json.

Usage: python3 mlrref.py mlrref.json. Prints one JSON object: per device the relevant
lower and upper bound of each loss ratio, every trial (duration, load, sent, lost) and the
sum of trial durations. The trials are computed, not run: the search takes well under a second.
"""

import json
import math
import sys

from MLRsearch import AbstractMeasurer, Config, MeasurementResult
from MLRsearch import MultipleLossRatioSearch, SearchGoal


def lost_of(dev, rate, duration):
    """Packets sent and lost by dev at rate for duration (as mlrref_test.go computes them)."""
    sent = math.floor(rate * duration + 0.5)
    loss = 0.0
    if dev.get("step_rate", 0) > 0 and rate > dev["step_rate"]:
        loss += sent * dev["step_loss"]
    if dev.get("slope", 0) > 0 and rate > dev["knee"]:
        loss += sent * dev["slope"] * (rate - dev["knee"]) / rate
    if dev.get("capacity", 0) > 0:
        over = sent - loss - (dev["capacity"] * duration + dev.get("buffer", 0))
        if over > 0:
            loss += over
    return sent, min(sent, math.ceil(loss - 1e-9))


class Measurer(AbstractMeasurer):
    def __init__(self, dev):
        self.dev = dev
        self.trials = []

    def measure(self, intended_duration, intended_load):
        sent, lost = lost_of(self.dev, intended_load, intended_duration)
        self.trials.append({"duration": intended_duration, "rate": intended_load, "sent": sent, "lost": lost})
        return MeasurementResult(intended_duration=intended_duration, intended_load=intended_load,
                                 offered_count=sent, loss_count=lost)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    s = spec["search"]
    goals = [SearchGoal(loss_ratio=lr, exceed_ratio=s["exceed_ratio"], relative_width=s["relative_width"],
                        initial_trial_duration=s["initial_duration"], final_trial_duration=s["final_duration"],
                        duration_sum=s["final_duration"], fail_fast=False)
             for lr in s["loss_ratios"]]
    out = []
    for dev in spec["devices"]:
        config = Config()
        config.goals = goals
        config.min_load = s["min_rate"]
        config.max_load = s["max_rate"]
        config.warmup_duration = None  # its result is thrown away; the Go search runs none
        m = Measurer(dev)
        results = MultipleLossRatioSearch(config=config).search(measurer=m, debug=lambda _: None)
        res = []
        for goal in goals:
            r = results[goal]
            lo, up = r.relevant_lower_bound, r.relevant_upper_bound
            res.append({"loss_ratio": goal.loss_ratio, "lower": float(lo) if lo else 0.0,
                        "upper": float(up) if up else 0.0})
        out.append({"name": dev["name"], "goals": res, "trials": m.trials,
                    "trial_time": sum(t["duration"] for t in m.trials)})
    json.dump({"devices": out}, sys.stdout)


if __name__ == "__main__":
    main()
