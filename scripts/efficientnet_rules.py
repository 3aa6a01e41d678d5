#!/usr/bin/env python3
"""EfficientNet-B4 rules of this project (docs/rules/efficientnet_b4.md): load and check them.

  efficientnet_rules.py check-rules            the JSON and every ruleset YAML parse and are
                                               well formed (exit 1 naming file and line if not)
  efficientnet_rules.py check-log LOG [--rules-dir D]
                                               check-rules, then the official mlperf_logging
                                               checker with our ruleset (exit status its own)
  efficientnet_rules.py update-names           rewrite the weights_initialization name list of
                                               closed_efficientnet_b4.yaml from torchvision

The official checker loads a ruleset with yaml.load and no handler: a syntax error is a Python
traceback. check-rules (run by check-log first) turns it into one line naming the file.
The harness enforces the JSON form before a run in C++ (harness/rules/efficientnet_rules.h).
"""

import argparse
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES_JSON = os.path.join(REPO, "harness", "rules", "efficientnet_b4.json")
RULESET_DIR = os.path.join(REPO, "harness", "rules", "training_efficientnet")
RULESET_FILES = ["common.yaml", "closed_common.yaml", "open_common.yaml",
                 "closed_efficientnet_b4.yaml", "open_efficientnet_b4.yaml"]
# The parser of the last round with an image-classification benchmark (ResNet-50).
CHECKER_RULESET = "4.0.0"
REQ_PATTERN = re.compile(r"^(EXACTLY_ONE|AT_LEAST_ONE|OPTIONAL|AT_LEAST\(\d+\)|"
                         r"AT_LEAST_ONE_OR\([a-z0-9_, ]+\))$")
KEY_FIELDS = {"NAME", "REQ", "PRE", "CHECK", "POST", "ATLEAST_ONE_CHECK", "FIRST_CHECK"}


class RulesError(Exception):
    """A rules file that cannot be used; the message names the file (and line)."""


def load_json_rules(path=RULES_JSON):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise RulesError(f"{path}: cannot read the rules: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise RulesError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from e


def _compile(path, where, code, mode):
    try:
        compile(code.strip(), f"{path} ({where})", mode)
    except SyntaxError as e:
        raise RulesError(f"{path}: {where}: not valid Python ({mode}): {e.msg}: "
                         f"{code.strip()!r}") from e


def load_ruleset_yaml(path):
    """Parses one ruleset file as the checker does (BaseLoader) and checks its structure."""
    import yaml  # Debian python3-yaml; the checker depends on PyYAML too
    try:
        with open(path) as f:
            records = yaml.load(f, Loader=yaml.BaseLoader)
    except OSError as e:
        raise RulesError(f"{path}: cannot read the ruleset: {e.strerror}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise RulesError(f"{path}{where}: YAML syntax error: {problem} (the mlperf_logging "
                         f"checker would stop with a traceback on this file)") from e
    if records is None:
        return []
    if not isinstance(records, list):
        raise RulesError(f"{path}: a ruleset is a YAML list of BEGIN/KEY/END records")
    begins = ends = 0
    for i, record in enumerate(records, 1):
        if not isinstance(record, dict) or len(record) != 1:
            raise RulesError(f"{path}: record {i} must be one of BEGIN:, KEY:, END:")
        kind, body = next(iter(record.items()))
        if kind == "BEGIN":
            begins += 1
            _compile(path, f"BEGIN record {i} CODE", body.get("CODE", ""), "exec")
        elif kind == "END":
            ends += 1
            _compile(path, f"END record {i} PRE", body.get("PRE", ""), "exec")
            for test in _as_list(body.get("CHECK", [])):
                _compile(path, f"END record {i} CHECK", test, "eval")
        elif kind == "KEY":
            if not isinstance(body, dict) or "NAME" not in body:
                raise RulesError(f"{path}: KEY record {i} has no NAME")
            name = body["NAME"]
            unknown = set(body) - KEY_FIELDS
            if unknown:
                raise RulesError(f"{path}: KEY {name}: unknown field(s) {sorted(unknown)}; "
                                 f"the checker knows {sorted(KEY_FIELDS)}")
            if "REQ" in body and not REQ_PATTERN.match(body["REQ"]):
                raise RulesError(f"{path}: KEY {name}: REQ {body['REQ']!r} is not one of "
                                 f"EXACTLY_ONE, AT_LEAST_ONE, AT_LEAST(n), AT_LEAST_ONE_OR(..), "
                                 f"OPTIONAL")
            for field in ("PRE", "POST"):
                if field in body:
                    _compile(path, f"KEY {name} {field}", body[field], "exec")
            for field in ("CHECK", "ATLEAST_ONE_CHECK", "FIRST_CHECK"):
                for test in _as_list(body.get(field, [])):
                    _compile(path, f"KEY {name} {field}", test, "eval")
        else:
            raise RulesError(f"{path}: record {i} is {kind!r}; expected BEGIN, KEY or END")
    if begins > 1 or ends > 1:
        raise RulesError(f"{path}: at most one BEGIN and one END record (the checker asserts it)")
    return records


def _as_list(x):
    return x if isinstance(x, list) else [x]


def check_rules(ruleset_dir=RULESET_DIR, rules_json=RULES_JSON):
    load_json_rules(rules_json)
    for name in RULESET_FILES:
        load_ruleset_yaml(os.path.join(ruleset_dir, name))


def names_from_torchvision():
    import torchvision  # Debian python3-torchvision; random weights, nothing downloaded
    model = torchvision.models.efficientnet_b4()
    return [name for name, _ in model.named_parameters()]


def update_names(path=os.path.join(RULESET_DIR, "closed_efficientnet_b4.yaml")):
    names = names_from_torchvision()
    with open(path) as f:
        text = f.read()
    begin = re.search(r"^( *)# BEGIN torchvision efficientnet_b4 parameter names.*\n", text, re.M)
    end = re.search(r"^ *# END torchvision efficientnet_b4 parameter names", text, re.M)
    if not begin or not end:
        raise RulesError(f"{path}: the BEGIN/END markers of the name list are missing")
    indent = begin.group(1)
    body = indent + "expected_tensors = [\n" + "".join(
        f"{indent}    {json.dumps(n)},\n" for n in names) + indent + "]\n"
    with open(path, "w") as f:
        f.write(text[:begin.end()] + body + text[end.start():])
    print(f"{path}: {len(names)} names")


def run_checker(log, python=None, ruleset_dir=RULESET_DIR):
    python = python or os.path.join(REPO, ".venv", "bin", "python")
    # --config must be absolute: the checker joins a relative one to its package folder.
    entry = os.path.join(os.path.abspath(ruleset_dir), "common.yaml")
    cmd = [python, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
           "--ruleset", CHECKER_RULESET, "--config", entry, "--log_output", os.devnull,
           os.path.abspath(log)]
    return subprocess.run(cmd, capture_output=True, text=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check-rules")
    c = sub.add_parser("check-log")
    c.add_argument("log")
    c.add_argument("--rules-dir", default=RULESET_DIR, help="the ruleset folder (default: ours)")
    sub.add_parser("update-names")
    args = parser.parse_args(argv)
    try:
        if args.command == "check-rules":
            check_rules()
            print(f"rules OK: {os.path.relpath(RULES_JSON, REPO)}, "
                  f"{len(RULESET_FILES)} files in {os.path.relpath(RULESET_DIR, REPO)}")
        elif args.command == "check-log":
            check_rules(args.rules_dir)
            if not os.path.isfile(args.log):
                raise RulesError(f"{args.log}: no such log file (a run_benchmark result_<i>.txt)")
            r = run_checker(args.log, ruleset_dir=args.rules_dir)
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
            return r.returncode
        elif args.command == "update-names":
            update_names()
    except RulesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
