#!/usr/bin/env bash
# Tests scripts/android/deploy.sh without a phone: its --help, its answers to bad arguments
# (exit status 2) and to a missing or wrong binary, model or adb (exit status 1), the exact adb
# commands of --dry-run, and a real run against a fake `adb` on PATH that logs each call and
# plays the phone in a temporary folder (push copies, `shell` runs the command with sh, the
# pushed ferrolm prints its arguments), so the quoting of the remote command is checked too.
# Needs bash, coreutils and sh; no adb, no phone, no ferrolm build.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

deploy=scripts/android/deploy.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    printf '[test-deploy] FAIL: %s\n' "$*" >&2
    failures=$((failures + 1))
}
pass() { printf '[test-deploy] ok: %s\n' "$*"; }

# An aarch64 ELF header (e_machine 0xb7 at byte 18) stands in for the binary; a short file for
# the model.
printf '\177ELF\002\001\001\000\000\000\000\000\000\000\000\000\002\000\267\000' >"$tmp/ferrolm"
printf 'GGUF model' >"$tmp/model.gguf"
base=(--binary "$tmp/ferrolm" --model "$tmp/model.gguf")

# expect STATUS MESSAGE ARGS...: deploy.sh ARGS exits with STATUS and says MESSAGE on stderr.
expect() {
    local want=$1 message=$2 status=0
    shift 2
    bash "$deploy" "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
    if [[ $status != "$want" ]] || ! grep -qF -- "$message" "$tmp/err"; then
        fail "deploy.sh $* gave status $status (want $want), stderr: $(cat "$tmp/err")"
    else
        pass "deploy.sh $* -> $want: $message"
    fi
}

# --help
if bash "$deploy" --help >"$tmp/help" && grep -q -- '--dry-run' "$tmp/help" && grep -q '^Usage:' "$tmp/help"; then
    pass "--help"
else
    fail "--help: $(cat "$tmp/help")"
fi

# Bad arguments: status 2 and what is wrong.
expect 2 "unknown argument '--bogus'" --bogus
expect 2 "--serial needs a value" --serial
expect 2 "--serial needs a value" --serial --dry-run
expect 2 "--model needs a value" --model ""
expect 2 "--remote-dir must be an absolute path" "${base[@]}" --remote-dir data/ferrolm --dry-run
# Missing or wrong files, missing adb: status 1 and what to do.
expect 1 "no ferrolm binary at $tmp/nothing" --binary "$tmp/nothing" --dry-run
expect 1 "scripts/build-aarch64.sh --target musl" --binary "$tmp/model.gguf" --dry-run
expect 1 "no model at $tmp/nothing.gguf" --binary "$tmp/ferrolm" --model "$tmp/nothing.gguf" --dry-run
ADB="$tmp/no-adb" expect 1 "install Debian's android-sdk-platform-tools" "${base[@]}"

# --dry-run: the exact commands, and nothing run (ADB points nowhere).
cat >"$tmp/want-dry" <<EOF
adb -s R5CX shell getprop ro.product.model
adb -s R5CX shell mkdir -p /data/local/tmp/ferrolm
adb -s R5CX push --sync $tmp/ferrolm /data/local/tmp/ferrolm/ferrolm
adb -s R5CX push --sync $tmp/model.gguf /data/local/tmp/ferrolm/model.gguf
adb -s R5CX shell chmod 755 /data/local/tmp/ferrolm/ferrolm
adb -s R5CX shell 'cd /data/local/tmp/ferrolm && ./ferrolm bench -m model.gguf -o jsonl --device-name '\\''<ro.product.model>'\\'' -p 16 -t 4,8 > results.jsonl'
adb -s R5CX pull /data/local/tmp/ferrolm/results.jsonl 'bench-results/.<ro.product.model>.part'
# then: append bench-results/.<ro.product.model>.part to bench-results/<ro.product.model>.jsonl
EOF
mkdir -p "$tmp/trap"
printf '#!/bin/sh\ntouch "%s/adb-was-run"\nexit 1\n' "$tmp" >"$tmp/trap/adb"
chmod +x "$tmp/trap/adb"
if PATH="$tmp/trap:$PATH" bash "$deploy" "${base[@]}" --serial R5CX --dry-run -- -p 16 -t 4,8 >"$tmp/dry" &&
    diff -u "$tmp/want-dry" "$tmp/dry" && [[ ! -e "$tmp/adb-was-run" ]]; then
    pass "--dry-run prints the adb commands"
else
    fail "--dry-run output differs (above)"
fi

# A fake adb playing the phone: the "phone" is $tmp/phone.
mkdir -p "$tmp/bin" "$tmp/phone"
cat >"$tmp/bin/adb" <<'EOF'
#!/usr/bin/env bash
# Logs its arguments (one call per line, words separated by " | ") and acts like a phone.
set -euo pipefail
(IFS='|'; printf '%s\n' "$*" | sed 's/|/ | /g') >>"$FAKE_ADB_LOG"
[[ "$1" == -s ]] && shift 2
case $1 in
    push) cp "$3" "$4"
          # The pushed program prints its arguments, one per line (or fails, on request).
          if [[ "$4" == */ferrolm ]]; then
              printf '#!/bin/sh\n[ -z "$FAKE_FAIL" ] || exit 3\nprintf "%%s\\n" "$@"\n' >"$4"
          fi ;;
    pull) cp "$2" "$3" ;;
    shell) shift
           if [[ "$*" == "getprop ro.product.model" ]]; then echo "Fake Phone 9"; else sh -c "$*"; fi ;;
    *) echo "fake adb: unexpected $1" >&2; exit 1 ;;
esac
EOF
chmod +x "$tmp/bin/adb"
export FAKE_ADB_LOG="$tmp/adb.log"
real() { PATH="$tmp/bin:$PATH" bash "$deploy" "${base[@]}" --remote-dir "$tmp/phone" --results "$tmp/results" "$@"; }
for run in 1 2; do
    : >"$FAKE_ADB_LOG"
    real -- -p 16 -t "4,8" >"$tmp/out" 2>"$tmp/err" || fail "run $run: $(cat "$tmp/err")"
done
cat >"$tmp/want-log" <<EOF
shell | getprop | ro.product.model
shell | mkdir | -p | $tmp/phone
push | --sync | $tmp/ferrolm | $tmp/phone/ferrolm
push | --sync | $tmp/model.gguf | $tmp/phone/model.gguf
shell | chmod | 755 | $tmp/phone/ferrolm
shell | cd $tmp/phone && ./ferrolm bench -m model.gguf -o jsonl --device-name 'Fake Phone 9' -p 16 -t 4,8 > results.jsonl
pull | $tmp/phone/results.jsonl | $tmp/results/.Fake-Phone-9.part
EOF
if diff -u "$tmp/want-log" "$FAKE_ADB_LOG"; then pass "adb called with the expected arguments"; else fail "adb calls differ (above)"; fi
# What ferrolm received on the "phone", twice (the second run appends).
args=$'bench\n-m\nmodel.gguf\n-o\njsonl\n--device-name\nFake Phone 9\n-p\n16\n-t\n4,8'
if [[ "$(cat "$tmp/results/Fake-Phone-9.jsonl")" == "$args"$'\n'"$args" ]]; then
    pass "results appended to results/Fake-Phone-9.jsonl"
else
    fail "results file: $(cat "$tmp/results/Fake-Phone-9.jsonl" 2>&1)"
fi
[[ ! -e "$tmp/results/.Fake-Phone-9.part" ]] || fail "the partial file was left behind"

# A subcommand replaces bench; a quote in an argument survives the phone's shell.
: >"$FAKE_ADB_LOG"
real --serial S1 --device-name "lab board" -- generate -m model.gguf -p "it's 1 > 0" >"$tmp/out" 2>"$tmp/err" ||
    fail "generate run: $(cat "$tmp/err")"
if [[ "$(cat "$tmp/results/lab-board.generate.txt")" == $'generate\n-m\nmodel.gguf\n-p\nit\'s 1 > 0' ]] &&
    grep -q '^-s | S1 | shell | mkdir' "$FAKE_ADB_LOG" && ! grep -q getprop "$FAKE_ADB_LOG" &&
    grep -qF "it's 1 > 0" "$tmp/out"; then
    pass "a custom command with --serial and --device-name"
else
    fail "custom command: $(cat "$tmp/results/lab-board.generate.txt" "$FAKE_ADB_LOG" 2>&1)"
fi

# ferrolm failing on the phone fails the script.
status=0
FAKE_FAIL=1 real >"$tmp/out" 2>"$tmp/err" || status=$?
if [[ $status == 1 ]] && grep -q "ferrolm failed on the phone (exit status 3)" "$tmp/err"; then
    pass "a failure on the phone is reported"
else
    fail "failure on the phone: status $status, $(cat "$tmp/err")"
fi

if [[ $failures -gt 0 ]]; then
    echo "[test-deploy] $failures check(s) failed" >&2
    exit 1
fi
echo "[test-deploy] all checks passed"
