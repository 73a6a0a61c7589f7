#!/usr/bin/env bash
# `weightcast keygen` makes a cluster secret every command accepts, in a new file of mode 0600,
# and never replaces an existing file without --force; a secret file other users can read is
# loaded with a warning; a short one is refused with the minimum named.
set -uo pipefail
wc="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0
check() {  # check NAME CONDITION-EXIT-STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1 ${3:-}"; fail=1; fi
}

"$wc" keygen --out "$work/secret" 2>"$work/err"
check keygen-exit $? "$(cat "$work/err")"
[ "$(stat -c %a "$work/secret")" = 600 ]
check keygen-mode-0600 $? "mode $(stat -c %a "$work/secret")"
grep -qxE '[0-9a-f]{64}' "$work/secret"
check keygen-64-hex-digits $? "$(cat "$work/secret")"
first="$(cat "$work/secret")"

# An existing file is left alone without --force, and replaced (still 0600) with it.
if "$wc" keygen --out "$work/secret" 2>"$work/err"; then check keygen-refuses-overwrite 1 "exited 0"
else grep -q -- "--force" "$work/err"; check keygen-refuses-overwrite $? "$(cat "$work/err")"; fi
[ "$(cat "$work/secret")" = "$first" ]
check keygen-left-file-alone $?
chmod 644 "$work/secret"
"$wc" keygen --out "$work/secret" --force 2>/dev/null
check keygen-force-exit $?
[ "$(cat "$work/secret")" != "$first" ] && [ "$(stat -c %a "$work/secret")" = 600 ]
check keygen-force-replaces-0600 $? "mode $(stat -c %a "$work/secret")"

# Without --out the secret goes to stdout; two runs differ.
a="$("$wc" keygen)"; b="$("$wc" keygen)"
[[ "$a" =~ ^[0-9a-f]{64}$ ]] && [ "$a" != "$b" ]
check keygen-stdout $? "'$a' '$b'"

# The file loads quietly where every command loads it: `status` against a closed port fails on
# the connection, not on the secret.
"$wc" status --secret-file "$work/secret" --coordinator 127.0.0.1:1 --connect-timeout 1s \
  >/dev/null 2>"$work/err"
! grep -qiE "secret|WARN" "$work/err"
check keygen-secret-loads $? "$(cat "$work/err")"

# A secret file other users can read: loaded, with a warning naming the file and its mode.
cp "$work/secret" "$work/open"; chmod 644 "$work/open"
"$wc" status --secret-file "$work/open" --coordinator 127.0.0.1:1 --connect-timeout 1s \
  >/dev/null 2>"$work/err"
grep -q "WARN secret file $work/open has mode 0644" "$work/err"
check open-secret-warns $? "$(cat "$work/err")"

# A short secret: refused, the minimum named; the help says it before the error does.
printf 'short\n' >"$work/short"; chmod 600 "$work/short"
"$wc" status --secret-file "$work/short" --coordinator 127.0.0.1:1 >/dev/null 2>"$work/err"
grep -q "at least 16 bytes" "$work/err"
check short-secret-names-minimum $? "$(cat "$work/err")"
"$wc" serve --help | grep -q "at least 16 bytes"
check help-names-minimum $?
exit $fail
