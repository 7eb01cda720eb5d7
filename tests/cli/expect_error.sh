# Sourced by the CLI test scripts. expect_error NAME PATTERN -- command...: the command must exit
# with 1..127 (an error, not a crash by signal) and print a message matching PATTERN (ERE, any
# case) on stderr; a failure is counted in the caller's `fails`.
expect_error() {
  local name=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
    echo "FAIL $name: exit code $rc (want 1..127)"; echo "$out" | head -5; fails=$((fails+1)); return
  fi
  if ! grep -qiE "$pattern" <<<"$out"; then
    echo "FAIL $name: message does not match /$pattern/:"; echo "$out" | head -5; fails=$((fails+1)); return
  fi
  echo "ok   $name: $(head -1 <<<"$out")"
}
