#!/usr/bin/env python3
"""Refresh the table of docs/search.md's "Search's pick against the recipes' layouts" from
`pplan validate --runs data/runs/megatron-bridge-2025-26.json data/runs/megatron-bridge-gb300.json
--against-search`: everything between `<!-- against-search: begin -->` and
`<!-- against-search: end -->` is replaced by what the command prints now (a search per row:
a few minutes on 2 cores). `cargo test --release --test runs_against_search -- --ignored` fails
while the page is stale. The prose around the table names the mechanism behind each large claim;
read it again after a refresh, the figures it quotes move with the cost model.

    cargo build --release && python3 scripts/refresh_search_table.py [target/release/pplan]
"""
import subprocess
import sys

PAGE = "docs/search.md"
BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/pplan"
FILES = ["data/runs/megatron-bridge-2025-26.json", "data/runs/megatron-bridge-gb300.json"]
BEGIN = "<!-- against-search: begin -->\n"
END = "<!-- against-search: end -->"

out = subprocess.run([BIN, "validate", "--runs", *FILES, "--against-search"],
                     capture_output=True, text=True)
if out.returncode != 0:
    sys.exit(f"pplan validate --runs --against-search failed:\n{out.stderr}")
text = open(PAGE).read()
start = text.index(BEGIN) + len(BEGIN)
stop = text.index(END, start)
text = text[:start] + "\n" + out.stdout.strip("\n") + "\n\n" + text[stop:]
open(PAGE, "w").write(text)
print(f"refreshed {PAGE}")
