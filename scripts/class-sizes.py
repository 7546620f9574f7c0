#!/usr/bin/env python3
"""Lists the size of every class in lib/ (or the folders given), largest first: the lines of its
declaration plus those of its member functions defined outside it, as Universal Ctags finds them.

Usage: scripts/class-sizes.py [--over N] [--allow FILE] [FOLDER...]
  --over N      list only the classes over N lines; exit 1 if there is one (default: list them all)
  --allow FILE  classes that may be over N, one a line: `NAME  why it is not split`, as this
                script names them (`launch::Agent`); # starts a comment. A class the file names
                that is no longer over N is an error too: the line goes with the reason.
A smell alarm, not a target: a class over the limit is split by responsibility, or explained.
"""
import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys


def tags(folders):
    if shutil.which("ctags") is None:
        sys.exit("class-sizes: needs Universal Ctags (`apt-get install universal-ctags`)")
    out = subprocess.run(
        ["ctags", "--output-format=json", "--fields=+neKZ", "--languages=C++", "--kinds-C++=+p",
         "-R", "-f", "-", *folders],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") == "tag" and "end" in tag:
            yield tag


def sizes(folders):
    classes = {}  # qualified name -> (path, first line, last line) of its declaration
    members = []  # (class, path, first line, last line) of a member function's definition
    for tag in tags(folders):
        scope = tag.get("scope")
        name = f"{scope}::{tag['name']}" if scope else tag["name"]
        if tag["kind"] in ("class", "struct"):
            classes[name] = (tag["path"], tag["line"], tag["end"])
        elif tag["kind"] == "function" and tag.get("scopeKind") in ("class", "struct"):
            members.append((scope, tag["path"], tag["line"], tag["end"]))
    total = collections.Counter()
    for name, (path, first, last) in classes.items():
        total[name] += last - first + 1
    for scope, path, first, last in members:
        if scope not in classes:
            continue
        cpath, cfirst, clast = classes[scope]
        # Defined inside the declaration: already counted.
        if cpath == path and cfirst <= first and last <= clast:
            continue
        total[scope] += last - first + 1
    files = {name: classes[name][0] for name in total}
    return total, files


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--over", type=int, default=0)
    parser.add_argument("--allow", metavar="FILE")
    parser.add_argument("folders", nargs="*")
    args = parser.parse_args()
    allowed = read_allow_list(args.allow) if args.allow else {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders = args.folders or [os.path.join(root, "lib")]
    total, files = sizes(folders)
    over = False
    listed = set()
    for name, lines in total.most_common():
        if lines <= args.over:
            break
        short = name.replace("trainrun::", "").split("::__anon")[0] + (
            "::" + name.split("::")[-1] if "::__anon" in name else "")
        listed.add(short)
        why = allowed.get(short)
        over = over or (args.over > 0 and why is None)
        print(f"{lines:5d}  {short}  ({os.path.relpath(files[name], root)})" +
              (f"  allowed: {why}" if why else ""))
    stale = sorted(set(allowed) - listed)
    for name in stale:
        print(f"class-sizes: {name} is in {args.allow} but not over {args.over} lines (or gone): "
              "drop its line", file=sys.stderr)
    if over:
        print(f"class-sizes: a class over {args.over} lines: split it by responsibility, or say "
              f"in one line of {args.allow or 'an allow-list (--allow)'} why not", file=sys.stderr)
    return 1 if over or stale else 0


def read_allow_list(path):
    allowed = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"class-sizes: --allow {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, why = line.partition(" ")
        if not why.strip():
            sys.exit(f"class-sizes: {path}:{number}: `{name}` needs a reason after its name")
        allowed[name] = why.strip()
    return allowed


if __name__ == "__main__":
    sys.exit(main())
