#!/usr/bin/env python3
"""Where the test command's time goes: ctest's per-test times of the last run in BUILD
(Testing/Temporary/CTestCostData.txt), grouped by the program or script each test runs (from
`ctest --show-only=json-v1`), as Markdown tables for docs/testing.md. Serial tests (RUN_SERIAL)
are marked: while one runs, nothing else does.

    python3 scripts/test_times.py [BUILD] [--top N]
"""
import argparse
import collections
import json
import pathlib
import subprocess


def costs(build: pathlib.Path):
    """{test name: seconds of its last run} from ctest's cost file."""
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
    suites = collections.defaultdict(lambda: [0, 0.0, 0.0, False])
    singles = []
    for name, suite, serial in tests(args.build):
        seconds = times.get(name, 0.0)
        entry = suites[suite]
        entry[0] += 1
        entry[1] += seconds
        entry[2] = max(entry[2], seconds)
        entry[3] = entry[3] or serial
        singles.append((seconds, name, serial))
    total = sum(entry[1] for entry in suites.values())
    serial_total = sum(s for s, _, serial in singles if serial)
    print(f"{len(singles)} tests, {total:,.0f} s of test time, of which {serial_total:,.0f} s in serial tests\n")
    print("| suite (program or script) | tests | seconds | slowest test (s) | serial |")
    print("| --- | --: | --: | --: | --- |")
    for suite, (count, seconds, slowest, serial) in sorted(suites.items(), key=lambda item: -item[1][1]):
        print(f"| {suite} | {count} | {seconds:,.0f} | {slowest:,.0f} | {'yes' if serial else ''} |")
    print(f"\nThe {args.top} slowest tests:\n")
    print("| test | seconds | serial |")
    print("| --- | --: | --- |")
    for seconds, name, serial in sorted(singles, reverse=True)[:args.top]:
        print(f"| {name} | {seconds:,.1f} | {'yes' if serial else ''} |")


if __name__ == "__main__":
    main()
