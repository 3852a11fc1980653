"""Scripts that go wrong in each way a training script can: ``bad.py WAY``. No framework, so each trial is quick."""

import json
import os
import sys
import time

import stepwatch

way = sys.argv[1]
rank = int(os.environ.get("RANK", "0"))
if way == "never-marks":
    for _ in range(100):
        pass
elif way == "fewer":
    for _ in stepwatch.steps(range(15), examples_per_step=4):
        pass
elif way == "raises":
    for index in stepwatch.steps(range(1000), examples_per_step=4):
        if index == 12:
            raise ValueError("the loss went the wrong way")
elif way == "hangs":
    for _ in stepwatch.steps(range(1000), examples_per_step=4):
        print("waiting for a batch that never comes", flush=True)  # what the log's tail shows of it
        time.sleep(3600)
elif way == "exits":
    for index in stepwatch.steps(range(1000), examples_per_step=4):
        if index == 5:
            sys.exit(5)
elif way == "twice":
    for _ in stepwatch.steps(range(1000), examples_per_step=4):
        for _ in stepwatch.steps(range(2), examples_per_step=4):
            pass
elif way == "rank-1-dies":
    for index in stepwatch.steps(range(1000), examples_per_step=4):
        if rank == 1 and index == 8:
            os._exit(7)
        time.sleep(0.001)
elif way == "rank-1-hangs":
    for index in stepwatch.steps(range(1000), examples_per_step=4):
        if rank == 1 and index == 8:
            time.sleep(3600)
elif way == "good":
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # what a rank finds, as its framework's launcher would give it
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        assert task == {"type": "worker", "index": rank} and os.environ["LOCAL_RANK"] == str(rank), os.environ
        assert os.environ["MASTER_ADDR"] == "127.0.0.1" and int(os.environ["MASTER_PORT"]) > 0
    for _epoch in range(10):  # epochs: each loop counts on
        for _ in stepwatch.steps(range(20), examples_per_step=4):
            time.sleep(0.001)
elif way == "marks-each-step":  # a loop that is no loader: stepwatch.step at the end of each step
    while True:
        time.sleep(0.001)
        stepwatch.step(examples=4)
elif way == "swallows-the-stop":  # catches everything, stepwatch's stop included, then ends on its own
    try:
        for _ in stepwatch.steps(range(1000), examples_per_step=4):
            time.sleep(0.001)
    except BaseException:  # noqa: BLE001 - what such a script does
        pass
    print("the script went on after its loop", flush=True)
elif way == "swallows-and-stays":  # catches the stop, then never ends: killed at its timeout, measured all the same
    try:
        for _ in stepwatch.steps(range(1000), examples_per_step=4):
            time.sleep(0.001)
    except BaseException:  # noqa: BLE001 - what such a script does
        pass
    while True:
        time.sleep(0.1)
elif way == "marks-in-a-thread":  # the training loop runs in a thread of its own; the main thread waits for it
    import threading

    def train() -> None:
        for _ in stepwatch.steps(range(1000), examples_per_step=4):
            time.sleep(0.001)

    worker = threading.Thread(target=train, name="trainer")
    worker.start()
    worker.join()
elif way == "spins":  # busy on the CPU in every step: a CPU quota holds it back
    for _ in stepwatch.steps(range(10**9), examples_per_step=4):
        sum(range(100_000))
else:
    raise SystemExit(f"unknown way {way}")
