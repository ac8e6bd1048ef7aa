#!/usr/bin/env bash
# Runs examples/grpc_service (a sync and a callback gRPC server, Quote and Receipt
# RPCs, each called with its own traceparent) and checks its profiles as
# `go tool pprof` reads them: one CPU profile per RPC, under the span id its client
# sent, its span_name the RPC's method (`-tags`), and the handler's hot function on
# top (`-top`).
set -euo pipefail
binary=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
SPANPROF_OUTPUT_DIR="$dir" "$binary" > "$dir/out.txt"
cat "$dir/out.txt"
rpcs=0
while read -r _ method server span status; do
  id=${span#span_id=}
  [ "$status" = "status=0" ] || { echo "FAIL: the $server server's $method failed: $status"; exit 1; }
  files=$(ls "$dir"/"$id"-*-cpu.pb.gz 2>/dev/null || true)
  [ "$(echo "$files" | grep -c .)" = 1 ] || { echo "FAIL: $id ($method, $server) has $(echo "$files" | grep -c .) CPU profiles"; exit 1; }
  tags=$(go tool pprof -tagfocus="span_id=^$id\$" -tags "$dir"/*.pb.gz 2>/dev/null)
  grep -q "span_name" <<<"$tags" && grep -q " $method\$" <<<"$tags" ||
    { echo "FAIL: $id's span_name is not $method"; echo "$tags"; exit 1; }
  # One span_name and one span_id under this span's filter: nothing else mixed in.
  [ "$(sed -n '/span_name/,/^ *$/p' <<<"$tags" | grep -c '%')" = 1 ] || { echo "FAIL: $id: several span names"; echo "$tags"; exit 1; }
  case $method in
    */Quote) hot=price_order ;;
    */Receipt) hot=render_receipt_part ;;
  esac
  top=$(go tool pprof -tagfocus="span_id=^$id\$" -top -nodecount=1 "$dir"/*.pb.gz 2>/dev/null | tail -1)
  grep -q "$hot" <<<"$top" || { echo "FAIL: $id ($method, $server): $hot is not on top: $top"; exit 1; }
  rpcs=$((rpcs + 1))
done < <(grep '^rpc ' "$dir/out.txt")
[ "$rpcs" = 8 ] || { echo "FAIL: $rpcs RPCs checked, 8 expected"; exit 1; }
# Every profile is an RPC's: go tool pprof -tags lists the two methods, nothing else.
names=$(go tool pprof -tags "$dir"/*-cpu.pb.gz 2>/dev/null | sed -n '/span_name/,/^ *$/p' | grep -c '%')
[ "$names" = 2 ] || { echo "FAIL: $names span names over all profiles, 2 expected"; exit 1; }
echo "ok: $rpcs RPCs, each one profile under its client's span id, named by its method, its hot function on top"
