#!/usr/bin/env python3
"""Atomic read-modify-write instructions per request, from a callgrind dump.

    scripts/bench/atomics.py CALLGRIND_FILE REQUESTS [TOP]

The dump must have been taken with `--dump-instr=yes` (scripts/bench/profile.sh
does): it then counts how often each instruction ran. Every object the dump
names (the program, libc, ...) is disassembled with objdump, and every
instruction with a `lock` prefix (or an `xchg` with memory, which locks
without one) is looked up in the dump: their executions, divided by
REQUESTS, are the atomic read-modify-writes per request, printed with the
functions that run the most of them.

Why count them: callgrind counts an atomic read-modify-write as one
instruction, but each costs about twenty cycles (it drains the store buffer),
so a request path full of them runs slower than its instruction count says
(docs/BENCHMARKS.md, "Atomic operations, the clock and LTO").
"""

import collections
import re
import subprocess
import sys


def self_costs(path):
    """Self cost per (object, instruction address) in the dump."""
    names = {}
    with open(path, errors="replace") as dump:
        for line in dump:
            m = re.match(r"c?ob=\((\d+)\) (.+)", line.rstrip("\n"))
            if m:
                names[m.group(1)] = m.group(2)
    cost = collections.Counter()
    function_of = {}
    functions = {}
    ob = fn = None
    last = 0
    after_call = False
    with open(path, errors="replace") as dump:
        for line in dump:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                m = re.match(r"\((\d+)\)", line[3:])
                ob = names.get(m.group(1)) if m else line[3:]
                continue
            if line.startswith(("fn=", "cfn=")):
                rest = line[line.index("=") + 1:]
                m = re.match(r"\((\d+)\)\s*(.*)", rest)
                if m:
                    if m.group(2):
                        functions[m.group(1)] = m.group(2)
                    if line.startswith("fn="):
                        fn = functions.get(m.group(1), "?")
                elif line.startswith("fn="):
                    fn = rest
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            if not line or line[0] not in "+-*0123456789":
                continue
            parts = line.split()
            position = parts[0]
            if position.startswith("0x"):
                address = int(position, 16)
            elif position[0] in "+-":
                step = position[1:]
                step = int(step, 16) if step.startswith("0x") else int(step)
                address = last + step if position[0] == "+" else last - step
            elif position == "*":
                address = last
            else:
                address = int(position)
            last = address
            if after_call:
                # An inclusive cost of the call made here, not this line's.
                after_call = False
                continue
            if ob and len(parts) >= 3:
                cost[(ob, address)] += int(parts[-1])
                function_of[(ob, address)] = fn
    return cost, function_of


def locked_addresses(binary):
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in listing.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if not m:
            continue
        instruction = m.group(2)
        if instruction.startswith("lock ") or (instruction.startswith("xchg") and "(" in instruction):
            yield int(m.group(1), 16)


def main():
    path, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    cost, function_of = self_costs(path)
    by_function = collections.Counter()
    total = 0
    for ob in sorted({ob for ob, _ in cost}):
        try:
            addresses = list(locked_addresses(ob))
        except (OSError, subprocess.CalledProcessError):
            continue
        for address in addresses:
            runs = cost.get((ob, address), 0)
            total += runs
            if runs:
                by_function[function_of.get((ob, address), "?")] += runs
    print("atomic read-modify-writes per request: %.1f" % (total / requests))
    for function, runs in by_function.most_common(top):
        print("%8.2f  %s" % (runs / requests, function[:140]))


if __name__ == "__main__":
    main()
