"""A training loop without a framework: ``paced.py SECONDS [GATE]`` takes SECONDS a step, and with GATE waits until
that file exists before its first step (a test holds the trial open until it has seen what it wants)."""

import itertools
import os
import sys
import time

import stepwatch

pace = float(sys.argv[1])
while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
    time.sleep(0.1)
for _ in stepwatch.steps(itertools.count(), examples_per_step=4):
    time.sleep(pace)
