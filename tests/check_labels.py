"""Every ctest test carries one layer label and one tier label (tests/CMakeLists.txt names both sets).

    python3 tests/check_labels.py CTEST BUILD_DIR --layers core,text,... --tiers unit,ranks,e2e,system

Reads `ctest --show-only=json-v1` in BUILD_DIR; exits 1 naming every test without exactly one of each."""
import argparse
import json
import subprocess
import sys


def problems(tests, layers, tiers):
    found = []
    for test in tests:
        labels = next((p["value"] for p in test.get("properties", []) if p["name"] == "LABELS"), [])
        # "system" is a layer and a tier: a system test of the system layer has that one label.
        ok = labels == ["system"] or (len(labels) == 2 and any(
            a in layers and b in tiers for a, b in (labels, labels[::-1])))
        if not ok:
            found.append("%s: labels %s (one layer of %s and one tier of %s)" % (test["name"], labels, "/".join(layers), "/".join(tiers)))
    return found


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("ctest")
    parser.add_argument("build_dir")
    parser.add_argument("--layers", required=True)
    parser.add_argument("--tiers", required=True)
    args = parser.parse_args(argv)
    shown = subprocess.run([args.ctest, "--show-only=json-v1"], cwd=args.build_dir, check=True, capture_output=True, text=True)
    tests = json.loads(shown.stdout)["tests"]
    found = problems(tests, args.layers.split(","), args.tiers.split(","))
    for line in found:
        print(line)
    print("check_labels: %d tests, %d without one layer and one tier" % (len(tests), len(found)))
    return 1 if found or not tests else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
