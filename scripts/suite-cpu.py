#!/usr/bin/env python3
"""Where the test suite's CPU goes (issue 56): samples every process's CPU
time once a second while a command runs, and prints the CPU seconds by
process name and by test. A process belongs to the test whose temporary
directory (/tmp/TestName123...) is in its command line or working
directory: MinIO servers, mounts, the binary's commands, Python loaders.

    /usr/bin/python3 scripts/suite-cpu.py -- ./.ci/run
    /usr/bin/python3 scripts/suite-cpu.py --top 40 -- go test ./integration/

A process that lives under a second is missed (short CLI commands, the
compiler's steps): process accounting (acct's accton and sa) counts those.
CPU a process used before the command started is not counted.
"""
import argparse
import os
import re
import subprocess
import sys
import time

TEST_DIR = re.compile(r'/(Test[A-Za-z0-9_]+?)\d{6,}')
HZ = os.sysconf('SC_CLK_TCK')


def cpu_of(pid):
    """comm and CPU seconds of pid, or None when it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            st = f.read()
    except OSError:
        return None
    close = st.rfind(')')
    fields = st[close + 2:].split()
    return st[st.find('(') + 1:close], (int(fields[11]) + int(fields[12])) / HZ


def test_of(pid):
    """The test whose temporary directory pid runs in or names, or ''."""
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            m = TEST_DIR.search(f.read().replace(b'\0', b' ').decode('utf-8', 'replace'))
        if not m:
            m = TEST_DIR.search(os.readlink(f'/proc/{pid}/cwd') + '/')
        return m.group(1) if m else ''
    except OSError:
        return ''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--top', type=int, default=25, help='rows of each table')
    ap.add_argument('command', nargs=argparse.REMAINDER, help='-- COMMAND ARGS...')
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ['--'] else a.command
    if not cmd:
        ap.error('give the command to measure after --')
    before = {}  # CPU each process had when the command started
    for d in os.listdir('/proc'):
        if d.isdigit() and (c := cpu_of(int(d))):
            before[int(d)] = c
    seen = {}  # pid -> [comm, test, cpu seconds since the start]
    proc = subprocess.Popen(cmd)
    start = time.time()
    while proc.poll() is None:
        for d in os.listdir('/proc'):
            if not d.isdigit():
                continue
            pid = int(d)
            c = cpu_of(pid)
            if c is None:
                continue
            comm, cpu = c
            e = seen.get(pid)
            if e is None or e[0] != comm:  # a new process, or a reused pid
                base = before[pid][1] if pid in before and before[pid][0] == comm and e is None else 0.0
                e = seen[pid] = [comm, test_of(pid), 0.0, base]
            e[2] = cpu - e[3]
        time.sleep(1)
    wall = time.time() - start
    by_comm, by_test = {}, {}
    for comm, test, cpu, _ in seen.values():
        by_comm[comm] = by_comm.get(comm, 0) + cpu
        if test:
            by_test[test] = by_test.get(test, 0) + cpu
    total = sum(by_comm.values())
    print(f'\n== suite-cpu: {total:.0f} CPU s sampled in {wall:.0f} s of wall time '
          f'({total / wall / os.cpu_count():.0%} of {os.cpu_count()} cores)')
    print('CPU s by process:')
    for k, v in sorted(by_comm.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f'{v:9.1f}  {k}')
    print("CPU s by test (its processes': MinIO, mounts, commands, Python):")
    for k, v in sorted(by_test.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f'{v:9.1f}  {k}')
    sys.exit(proc.returncode)


if __name__ == '__main__':
    main()
