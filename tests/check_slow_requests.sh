#!/usr/bin/env bash
# Runs examples/slow_requests (1 request in 100 slow) and checks what it wrote:
# exactly one profile per slow request, named by its span id, and every sample of
# each labelled profile_reason=slow, as `go tool pprof` reads them.
set -euo pipefail
binary=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
SPANPROF_OUTPUT_DIR="$dir" "$binary" > "$dir/out.txt"
cat "$dir/out.txt"
expected=$(grep '^slow span ' "$dir/out.txt" | awk '{print $3}' | sort || true)
written=$(ls "$dir" | grep '\.pb\.gz$' | cut -d- -f1 | sort || true)
[ -n "$expected" ] || { echo "FAIL: the example served no slow request"; exit 1; }
[ "$expected" = "$written" ] || { echo "FAIL: profiles written for: $written; slow spans: $expected"; exit 1; }
for file in "$dir"/*.pb.gz; do
  tags=$(go tool pprof -tags "$file" 2>/dev/null)
  # A here-string, not echo piped into grep -q: grep -q leaves at the first match,
  # the rest of echo's lines then meet a closed pipe, and under pipefail the
  # pipeline fails (CI: 1 run in 80 beside a compile).
  if ! grep -q 'profile_reason: Total' <<<"$tags"; then
    # What pprof made of the file, to tell an unreadable file from samples of no weight.
    echo "FAIL: no profile_reason label in $file ($(stat -c %s "$file") bytes); go tool pprof says:"
    go tool pprof -tags "$file" 2>&1 | head -20
    go tool pprof -raw "$file" 2>&1 | head -40
    exit 1
  fi
  # "profile_reason: Total 60ms" then one "  60ms (100%): <value>" line per value.
  reasons=$(awk '/^ *profile_reason:/{f=1;next} f&&/^ *$/{exit} f' <<<"$tags" | sed 's/.*): //' | sort -u)
  [ "$reasons" = "slow" ] || { echo "FAIL: profile_reason in $file is '$reasons', not slow"; exit 1; }
done
echo "ok: $(echo "$written" | wc -l) profiles, one per slow request, all profile_reason=slow"
