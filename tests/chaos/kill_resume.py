#!/usr/bin/env python3
"""Kill anywhere, resume, lose nothing.

Trains a small BERT on R MPI ranks with a checkpoint every step and an evaluation every few steps,
once without interruption (the reference), then again while killing it with SIGKILL at random
moments: one random rank, or every process of the job at once (mpirun included, as a node that
dies). After each kill the job must be gone within a deadline (no process left), every
checkpoint-* directory present must match its checksums.json, and the run goes on with
`--resume auto`. Once the kills are done the run finishes, and its final model.safetensors must be
byte-identical to the reference's. A run that finishes before all the kills are done is compared, and a new run is killed in turn.
Prints a line per kill and a summary; exit 1 on any failure.

  tests/chaos/kill_resume.py --ranks 2 --kills 12 [--seed 1] [--steps 24] [--work DIR]
"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, time, zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MPIBERT_BIN_DIR", os.path.join(ROOT, "build", "bin"))
MPIEXEC = os.environ.get("MPIEXEC", "mpirun")
VOCAB = os.path.join(ROOT, "data_prep", "data", "bert-base-uncased", "vocab.txt")
SQUAD = os.path.join(ROOT, "data_prep", "data", "squad", "dev-v1.1.json.gz")
GONE_DEADLINE = 30.0  # seconds for the whole job to come down after a kill


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def prepare(work):
    """Shards of one article to train on and one to evaluate, and the fixture's tiny model with dropout."""
    for split, articles in (("train", "0:1"), ("eval", "47:48")):
        part = os.path.join(work, split + ".json")
        run([os.path.join(BIN, "mpibert-prep"), "split", SQUAD, "--articles", articles, "--out", part])
        run([os.path.join(BIN, "mpibert-prep"), "--input", part, "--vocab", VOCAB, "--out", os.path.join(work, split),
             "--split", split, "--log-level", "warn"])
    config = json.load(open(os.path.join(ROOT, "tests", "fixtures", "model", "config.json")))
    config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)  # a resume must restore the RNG
    json.dump(config, open(os.path.join(work, "config.json"), "w"))


def train_command(work, out, ranks, steps):
    return [MPIEXEC, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", os.path.join(BIN, "mpibert"), "train",
            "--train-shards", os.path.join(work, "train"), "--eval-shards", os.path.join(work, "eval"),
            "--output-dir", out, "--model-config", os.path.join(work, "config.json"), "--vocab", VOCAB,
            "--max-steps", str(steps), "--batch-size", "4", "--learning-rate", "1e-3", "--warmup-ratio", "0.1",
            "--save-steps", "1", "--save-total-limit", "3", "--eval-steps", "6", "--logging-steps", "1",
            "--threads", "1", "--seed", "7", "--resume", "auto", "--collective-timeout", "60"]


def processes_of(marker):
    """PIDs of processes whose command line holds `marker` (the run's unique output directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def rank_of(pid):
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
            return int(entry.split(b"=", 1)[1])
    return None


def checkpoint_problems(out):
    """Every checkpoint-* directory must match its checksums.json; returns what does not."""
    problems = []
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        if not re.fullmatch(r"checkpoint-\d+", name):
            continue
        folder = os.path.join(out, name)
        try:
            files = json.load(open(os.path.join(folder, "checksums.json")))["files"]
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{name}: checksums.json unreadable ({error})")
            continue
        for file, expected in files.items():
            try:
                data = open(os.path.join(folder, file), "rb").read()
            except OSError as error:
                problems.append(f"{name}/{file}: {error}")
                continue
            if len(data) != expected["bytes"] or "%08x" % zlib.crc32(data) != expected["crc32"]:
                problems.append(f"{name}/{file}: does not match checksums.json")
    return problems


def moment(out, log_text):
    """Where the kill landed, from what the run left: a checkpoint half-written, an evaluation, a step."""
    # A kill can land before the run directory exists.
    names = os.listdir(out) if os.path.isdir(out) else []
    if any(n.startswith(".checkpoint-") and n.endswith(".tmp") for n in names):
        return "checkpoint write"
    lines = [l for l in log_text.splitlines() if "] " in l]
    last = lines[-1] if lines else ""
    if "training on" not in log_text.split("resumed from")[-1] and "step " not in last:
        return "setup"
    if "eval at step" in last or "evaluat" in last:
        return "after an evaluation"
    if "checkpoint:" in last:
        return "after a checkpoint"
    return "training step"


def kill_until_done(work, out, args, rng, duration, wanted, moments, failures, first_kill):
    """Starts the run with --resume auto again after each kill, `wanted` kills at most, then lets it
    finish. Returns (kills, attempts)."""
    kills, attempts = 0, 0
    while True:
        attempts += 1
        log_path = f"{out}-attempt-{attempts:02d}.log"
        log = open(log_path, "w")
        job = subprocess.Popen(train_command(work, out, args.ranks, args.steps), stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        if kills >= wanted:  # the last attempt runs to the end
            status = job.wait(timeout=600)
            log.close()
            if status != 0:
                failures.append(f"final attempt exited {status}: see {log_path}")
            return kills, attempts
        deadline = time.time() + rng.uniform(0.5, duration)
        while time.time() < deadline and job.poll() is None:
            time.sleep(0.05)
        if job.poll() is not None:  # finished before the kill: the run is complete
            log.close()
            if job.returncode != 0:
                failures.append(f"attempt {attempts} exited {job.returncode}: see {log_path}")
            return kills, attempts
        ranks = {rank_of(p): p for p in processes_of(out) if rank_of(p) is not None}
        whole_job = rng.random() < 0.3 or not ranks
        where = moment(out, open(log_path).read())
        if whole_job:
            target = "every process"
            os.killpg(job.pid, signal.SIGKILL)
        else:
            rank = rng.choice(sorted(ranks))
            target = f"rank {rank}"
            os.kill(ranks[rank], signal.SIGKILL)
        killed_at = time.time()
        number = first_kill + kills
        try:
            job.wait(timeout=GONE_DEADLINE)
        except subprocess.TimeoutExpired:
            failures.append(f"kill {number}: mpirun still running {GONE_DEADLINE:.0f} s after the kill")
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        while processes_of(out) and time.time() - killed_at < GONE_DEADLINE:
            time.sleep(0.1)
        left = processes_of(out)
        gone = time.time() - killed_at
        log.close()
        kills += 1
        moments[where] = moments.get(where, 0) + 1
        if left:
            failures.append(f"kill {number}: processes left behind: {left}")
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        problems = checkpoint_problems(out)
        failures += [f"kill {number}: {p}" for p in problems]
        present = sorted((n for n in os.listdir(out) if re.fullmatch(r"checkpoint-\d+", n)), key=lambda n: int(n[11:])) if os.path.isdir(out) else []
        print(f"kill {number:2d}: {target:13s} during {where:19s} job gone in {gone:4.1f} s; checkpoints {present}"
              f"{'; PROBLEMS: ' + '; '.join(problems) if problems else ''}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", help="keep the runs here (default: a temporary directory, removed)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = args.work or tempfile.mkdtemp(prefix="mpibert-chaos-")
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        prepare(work)
        reference = os.path.join(work, "reference")
        started = time.time()
        run(train_command(work, reference, args.ranks, args.steps))
        duration = time.time() - started
        print(f"reference run: {args.ranks} ranks, {args.steps} steps, {duration:.1f} s", flush=True)

        kills, attempts, rounds, moments, identical = 0, 0, 0, {}, 0
        # A round is one run killed until it finishes; rounds follow until the kills are done.
        while kills < args.kills:
            rounds += 1
            out = os.path.join(work, f"chaos-{rounds}")
            round_kills, round_attempts = kill_until_done(work, out, args, rng, duration, args.kills - kills, moments, failures,
                                                          first_kill=kills + 1)
            kills += round_kills
            attempts += round_attempts
            final, expected = os.path.join(out, "model.safetensors"), os.path.join(reference, "model.safetensors")
            if os.path.exists(final) and open(final, "rb").read() == open(expected, "rb").read():
                identical += 1
            else:
                failures.append(f"round {rounds}: the final model.safetensors differs from the uninterrupted run's")
        size = os.path.getsize(os.path.join(reference, "model.safetensors"))
        print(f"summary: {kills} kills over {attempts} attempts in {rounds} runs "
              f"({', '.join(f'{v} {k}' for k, v in sorted(moments.items()))}); final model.safetensors ({size} bytes) "
              f"byte-identical to the uninterrupted run's in {identical} of {rounds} runs", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
