#!/usr/bin/env bash
# README.md against the binary (issue 35 item 15): its list of commands is `caldrix --help`'s (the
# same names, in the same order), and every command line it shows, `build/caldrix CMD ...` in its
# code blocks and `caldrix CMD ...` in its text, names a command that exists and only options that
# `caldrix CMD --help` lists.
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
python3 - "$CALDRIX" README.md <<'PY'
import re, subprocess, sys
caldrix, readme = sys.argv[1], open(sys.argv[2], encoding='utf-8').read()
passed = failed = 0
def check(name, ok, detail=''):
    global passed, failed
    print(('ok - ' if ok else 'not ok - ') + name + ('' if ok else ': ' + detail))
    passed += ok
    failed += not ok
def helptext(*args):
    p = subprocess.run([caldrix, *args], capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr
top = helptext('--help')
commands = re.findall(r'^  ([a-z]+) {2,}', top, re.M)
check('caldrix --help lists commands', len(commands) >= 10, top[:300])
m = re.search(r'Commands \(`caldrix --help` lists them[^)]*\):(.*?)\.', readme, re.S)
listed = re.findall(r'`([a-z]+)`', m.group(1)) if m else []
check("README's command list is caldrix --help's, in its order", listed == commands,
      'README %s, --help %s' % (listed, commands))
options = {c: set(re.findall(r'(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b', helptext(c, '--help'))) for c in commands}
# command lines: code-block lines starting with build/caldrix, and `caldrix CMD ...` spans in the text
lines = [l.split('#')[0] for l in re.findall(r'^build/caldrix (.*)$', readme, re.M)]
lines += re.findall(r'`caldrix ([a-z]+ [^`]*)`', readme)
# "`caldrix run` options: ..." paragraph: every option in it is run's
para = re.search(r'`caldrix run` options:(.*?)\n\n', readme, re.S)
if para:
    lines.append('run ' + ' '.join(re.findall(r'`([^`]*)`', para.group(1))))
seen = 0
for l in lines:
    words = l.split()
    if not words or words[0].startswith('-'):
        continue  # build/caldrix --help
    cmd = words[0]
    if cmd not in options:
        check('README: "caldrix %s" is a command' % l.strip()[:60], False, 'no command %r' % cmd)
        continue
    seen += 1
    used = set(re.findall(r'(?<![\w-])(--[a-z][a-z0-9-]*)', l))
    unknown = sorted(used - options[cmd] - {'--help'})
    check('README: caldrix %s ... uses only options of %s --help' % (l.strip()[:50], cmd), not unknown,
          'not in `caldrix %s --help`: %s' % (cmd, unknown))
check('README: command lines were found (%d)' % seen, seen >= 12)
print('%d passed, %d failed' % (passed, failed))
sys.exit(1 if failed else 0)
PY
