#!/usr/bin/env python3
"""Refresh the tables of docs/validation.md from `pplan validate --runs`.

Every block of the page that follows a line `    pplan validate --runs data/runs/NAME.json`
(a blank line, then the command's report: "Runs of ...", the table, "Not counted:" lines and
the summary lines) is replaced by what the command prints now, and the "Every group" block by
the summary lines of all files at once. tests/docs_tables.rs fails while the page is stale.

    cargo build --release && python3 scripts/refresh_validation_tables.py [target/release/pplan]
"""
import glob
import re
import subprocess
import sys

PAGE = "docs/validation.md"
BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/pplan"
COMMAND = re.compile(r"^    pplan validate --runs (data/runs/[\w.-]+\.json)$")
SUMMARY = ("Runs of ", "| ", "|---", "Not counted: ", "worst: ", "predicted not to fit", "all ",
           "peak memory against ")


def report(*args):
    out = subprocess.run([BIN, "validate", "--runs", *args], capture_output=True, text=True)
    return out.stdout.rstrip("\n").split("\n")


def is_report_line(line, groups):
    return line.startswith(SUMMARY) or any(line.startswith(g + ": ") for g in groups) or re.match(
        r"^\d+ rows? could not be predicted", line)


lines = open(PAGE).read().split("\n")
groups = [p.split("/")[-1][:-5] for p in glob.glob("data/runs/*.json")]
out, i = [], 0
while i < len(lines):
    line = lines[i]
    out.append(line)
    m = COMMAND.match(line)
    i += 1
    if not m or i >= len(lines) or lines[i] != "":
        continue
    # The blank line, then the old report up to the first line that is not part of one.
    j = i + 1
    while j < len(lines) and (lines[j] == "" or is_report_line(lines[j], groups)):
        j += 1
    while j > i + 1 and lines[j - 1] == "":
        j -= 1
    out.append("")
    out.extend(report(m.group(1)))
    i = j
    if i < len(lines) and lines[i] != "":
        out.append("")
text = "\n".join(out)
# "Every group": the summary of all files, indented.
every = [l for l in report(*sorted(glob.glob("data/runs/*.json")))
         if l and not l.startswith(("|", "Runs of ", "Not counted"))]
text = re.sub(r"(## Every group\n\n)(?:    .*\n)+", lambda m: m.group(1) + "".join(
    "    " + l + "\n" for l in every), text)
open(PAGE, "w").write(text)
print(f"refreshed {PAGE}")
