#!/usr/bin/env bash
# stress.sh: runs the tests of one or more packages N times, each run in a process of its own,
# and reports every failure. A flaky test shows up here long before it fails CI once in a dozen.
#
#   scripts/stress.sh [-n N] [-run REGEX] [-p P] [-timeout D] [-norace] [-out DIR] PKG...
#
#   -n N        runs per package (default 10)
#   -run REGEX  only the tests matching REGEX (go test -run): isolated runs of one test
#   -p P        runs at once (default 1; each run is its own process either way)
#   -timeout D  per run (default 10m)
#   -norace     build without the race detector (it is on by default, as in `make test`)
#   -out DIR    where the logs of failed runs are kept (default a new temporary directory)
#
# Each package's test binary is built once (go test -c), then run N times in the package's
# directory with -test.count=1, as `go test` runs it. The summary gives, per package, the runs,
# the failed runs and each failing test with its count; the exit status is 1 when any run
# failed. `make stress PKGS=./handlers RUN='TestX$' N=100` calls it.
set -euo pipefail

n=10 run= par=1 timeout=10m race=-race out=
while [ $# -gt 0 ]; do
	case "$1" in
	-n) n=$2; shift 2 ;;
	-run) run=$2; shift 2 ;;
	-p) par=$2; shift 2 ;;
	-timeout) timeout=$2; shift 2 ;;
	-norace) race=; shift ;;
	-out) out=$2; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "stress: unknown flag $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- ./...
case "$n$par" in *[!0-9]*) echo "stress: -n and -p take a number" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/flightdeck-stress.XXXXXX")}
mkdir -p "$out/bin"
pkgs=$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@")
[ -n "$pkgs" ] || { echo "stress: no package with tests in $*" >&2; exit 2; }

# one run: $1 package dir, $2 binary, $3 log
one() {
	local args=(-test.count=1 -test.timeout="$timeout")
	[ -n "$run" ] && args+=(-test.run="$run")
	(cd "$1" && "$2" "${args[@]}" -test.v >"$3" 2>&1)
}

failed_any=0
summary=()
while read -r pkg dir; do
	[ -n "$pkg" ] || continue
	bin="$out/bin/$(echo "$pkg" | tr '/.' '__').test"
	go test $race -c -o "$bin" "$pkg"
	[ -x "$bin" ] || { summary+=("$pkg: no test binary"); continue; }
	fails=0 started=$(date +%s)
	declare -A tests=()
	logs=()
	i=0
	while [ $i -lt "$n" ]; do
		pids=()
		for _ in $(seq 1 "$par"); do
			[ $i -lt "$n" ] || break
			i=$((i + 1))
			log="$out/$(echo "$pkg" | tr '/.' '__').run$i.log"
			logs+=("$log")
			one "$dir" "$bin" "$log" &
			pids+=("$!:$log:$i")
		done
		for p in "${pids[@]}"; do
			pid=${p%%:*} rest=${p#*:} log=${rest%:*} k=${rest##*:}
			if wait "$pid"; then
				rm -f "$log"
			else
				fails=$((fails + 1))
				names=$(grep -E '^\s*--- FAIL' "$log" | sed -E 's/^\s*--- FAIL: ([^ ]+).*/\1/' | sort -u | tr '\n' ' ')
				grep -q '^panic: test timed out' "$log" && names="$names(timeout) "
				[ -n "$names" ] || names="(no FAIL line: see the log) "
				for t in $names; do tests[$t]=$(( ${tests[$t]:-0} + 1 )); done
				echo "FAIL $pkg run $k: $names-> $log"
			fi
		done
	done
	line="$pkg: $n runs, $fails failed ($(( $(date +%s) - started )) s)"
	for t in "${!tests[@]}"; do line="$line; $t ${tests[$t]}x"; done
	summary+=("$line")
	[ $fails -eq 0 ] || failed_any=1
	unset tests
done <<<"$pkgs"

echo
rd=off; [ -n "$race" ] && rd=on
echo "stress: race detector $rd${run:+, -run $run}; logs of failed runs in $out"
printf '%s\n' "${summary[@]}"
exit $failed_any
