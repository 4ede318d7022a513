#!/usr/bin/env python3
"""Where the test command's time goes: ctest's per-test times in BUILD
(Testing/Temporary/CTestCostData.txt, each test's time averaged over the runs ctest has recorded
there: after the one full run of a fresh build, that run's times), grouped by the program or
script each test runs (from `ctest --show-only=json-v1`), as Markdown tables for docs/testing.md.
Serial tests (RUN_SERIAL) are marked: while one runs, nothing else does.

    python3 scripts/test_times.py [BUILD] [--top N]
"""
import argparse
import collections
import json
import pathlib
import subprocess


def costs(build: pathlib.Path):
    """{test name: seconds} from ctest's cost file."""
    times = {}
    for line in (build / "Testing/Temporary/CTestCostData.txt").read_text().splitlines():
        if line.startswith("---"):
            break
        name, _runs, seconds = line.rsplit(" ", 2)
        times[name] = float(seconds)
    return times


def what_runs(test):
    """The suite a test belongs to: its program under bin/, else the script it runs."""
    command = test.get("command", [])
    for part in command:
        if "/bin/" in part and not part.startswith("/usr/") and not pathlib.Path(part).name.startswith("python"):
            return pathlib.Path(part).name
    for part in command[1:]:
        if part.endswith((".sh", ".py")):
            return pathlib.Path(part).name
    if "-m" in command:  # python -m unittest MODULE[.CLASS]
        modules = [part for part in command[command.index("-m") + 1:] if part != "unittest"]
        return modules[0].split(".")[0] + ".py" if modules else "unittest"
    return pathlib.Path(command[0]).name if command else test["name"]


def tests(build: pathlib.Path):
    listing = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                                        capture_output=True, text=True).stdout)
    for test in listing["tests"]:
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        yield test["name"], what_runs(test), bool(properties.get("RUN_SERIAL"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", nargs="?", default="build", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    times = costs(args.build)
    rows = [(times.get(name, 0.0), name, suite, serial) for name, suite, serial in tests(args.build)]
    by_suite = collections.defaultdict(list)
    for row in rows:
        by_suite[row[2]].append(row)
    total = sum(row[0] for row in rows)
    serial_total = sum(row[0] for row in rows if row[3])
    print(f"{len(rows)} tests, {total:,.0f} s of test time, of which {serial_total:,.0f} s in serial tests\n")
    print("| suite (program or script) | tests | seconds | slowest test (s) | serial |")
    print("| --- | --: | --: | --: | --- |")
    for suite, members in sorted(by_suite.items(), key=lambda item: -sum(row[0] for row in item[1])):
        seconds = [row[0] for row in members]
        serial = any(row[3] for row in members)
        print(f"| {suite} | {len(members)} | {sum(seconds):,.0f} | {max(seconds):,.0f} | {'yes' if serial else ''} |")
    print(f"\nThe {args.top} slowest tests:\n")
    print("| test | seconds | serial |")
    print("| --- | --: | --- |")
    for seconds, name, _suite, serial in sorted(rows, reverse=True)[:args.top]:
        print(f"| {name} | {seconds:,.1f} | {'yes' if serial else ''} |")


if __name__ == "__main__":
    main()
