#!/usr/bin/env python3
"""List the config keys pplan's torchtitan emitters may write, statically (no torch import).

Usage:
  scripts/torchtitan_keys.py main TORCHTITAN_CHECKOUT > tests/data/torchtitan_keys.txt
  scripts/torchtitan_keys.py v0.2 TORCHTITAN_CHECKOUT > tests/data/torchtitan_v0.2_keys.txt

main (Python config functions): `TrainingConfig.f`, `ParallelismConfig.f` (torchtitan/config/
configs.py), `Trainer.Config.f` (torchtitan/trainer.py), `ac:Name` for each activation
checkpointing policy class (torchtitan/distributed/activation_checkpoint.py), and per model
directory with a config_registry.py `registry:MODEL:FUNCTION` and `flavor:MODEL:NAME` (the keys
of the flavor table in torchtitan/models/MODEL/__init__.py).
v0.2 (TOML job config): `section.key` for every dataclass field in torchtitan/config/
job_config.py, the section being the JobConfig field that holds the class.
"""
import ast
import os
import sys

which, root = sys.argv[1], sys.argv[2]


def parse(path):
    return ast.parse(open(os.path.join(root, path), encoding="utf-8").read())


def fields(cls):
    return [b.target.id for b in cls.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)]


def classes(tree):
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out.setdefault(node.name, node)
    return out


keys = set()
if which == "main":
    cfg = classes(parse("torchtitan/config/configs.py"))
    for name in ("TrainingConfig", "ParallelismConfig", "CompileConfig"):
        keys.update(f"{name}.{f}" for f in fields(cfg[name]))
    trainer = parse("torchtitan/trainer.py")
    for node in ast.walk(trainer):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for b in node.body:
                if isinstance(b, ast.ClassDef) and b.name == "Config":
                    keys.update(f"Trainer.Config.{f}" for f in fields(b))
    ac = parse("torchtitan/distributed/activation_checkpoint.py")
    for node in ac.body:
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.ClassDef) and b.name == "Config" for b in node.body
        ):
            keys.add(f"ac:{node.name}")
    models = os.path.join(root, "torchtitan", "models")
    for m in sorted(os.listdir(models)):
        reg = os.path.join("torchtitan", "models", m, "config_registry.py")
        if not os.path.exists(os.path.join(root, reg)):
            continue
        for node in parse(reg).body:
            if isinstance(node, ast.FunctionDef):
                keys.add(f"registry:{m}:{node.name}")
        init = os.path.join("torchtitan", "models", m, "__init__.py")
        for node in ast.walk(parse(init)):
            if isinstance(node, ast.Dict) and node.keys and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys
            ) and all(isinstance(v, ast.Name) for v in node.values):
                keys.update(f"flavor:{m}:{k.value}" for k in node.keys)
else:
    tree = parse("torchtitan/config/job_config.py")
    cls = classes(tree)
    job = cls["JobConfig"]
    for b in job.body:
        if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
            t = ast.unparse(b.annotation)
            if t in cls:
                keys.update(f"{b.target.id}.{f}" for f in fields(cls[t]))
for k in sorted(keys):
    print(k)
