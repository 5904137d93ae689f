#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for tests and prints, on stdout, the
# shell lines that point the tests at it:
#
#   eval "$(scripts/pg-start.sh)"   # exports AUTOMATOR_TEST_POSTGRES and AUTOMATOR_TEST_PGDIR
#   go test ./automator/store/pgstore/
#   scripts/pg-stop.sh "$AUTOMATOR_TEST_PGDIR"
#
# It uses the machine's PostgreSQL binaries (initdb, pg_ctl, postgres: from
# $PG_BIN, else the PATH, else the newest /usr/lib/postgresql/*/bin), makes a
# cluster in a new temporary directory, listens on 127.0.0.1 on a free port
# and on a unix socket in that directory, with durability switched off
# (fsync=off: tests only). The superuser is "postgres" with a random
# password, which the printed URL carries.
#
# initdb refuses to run as root: as root, the cluster is made and run by an
# unprivileged user, $PG_TEST_USER, else "postgres" (the Debian package makes
# it), else "nobody".
#
# Exit status: 0 started; 3 no PostgreSQL binaries found; 1 any other failure.
set -euo pipefail

die() { echo "pg-start: $*" >&2; exit 1; }

find_bin() {
	if [[ -n "${PG_BIN:-}" ]]; then
		echo "$PG_BIN"
		return
	fi
	local initdb
	if initdb=$(command -v initdb 2>/dev/null); then
		initdb=$(readlink -f "$initdb")
		local dir=${initdb%/*}
		if [[ -x "$dir/pg_ctl" && -x "$dir/postgres" ]]; then
			echo "$dir"
			return
		fi
	fi
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n "$d" ]]; then
		echo "$d"
		return
	fi
	if [[ -x /usr/local/pgsql/bin/initdb ]]; then
		echo /usr/local/pgsql/bin
	fi
}

bin=$(find_bin)
# A fresh Debian machine may lack the server: as root, install it from
# Debian's packages (quietly, to stderr), then look again.
if [[ -z "$bin" && $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "pg-start: installing PostgreSQL from Debian's packages" >&2
	{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; } >&2 || true
	bin=$(find_bin)
fi
if [[ -z "$bin" || ! -x "$bin/initdb" || ! -x "$bin/pg_ctl" || ! -x "$bin/postgres" ]]; then
	echo "pg-start: no PostgreSQL binaries (initdb, pg_ctl, postgres) found in \$PG_BIN, the PATH or /usr/lib/postgresql/*/bin; install PostgreSQL (Debian: apt-get install postgresql) or set AUTOMATOR_TEST_POSTGRES to a server's URL" >&2
	exit 3
fi

# as USER CMD...: runs CMD as the cluster's owner.
user=""
tmp=${TMPDIR:-/tmp}
if [[ $(id -u) == 0 ]]; then
	user=${PG_TEST_USER:-}
	if [[ -z "$user" ]]; then
		if id postgres >/dev/null 2>&1; then user=postgres; else user=nobody; fi
	fi
	id "$user" >/dev/null 2>&1 || die "user $user does not exist; set PG_TEST_USER to an unprivileged user"
	# The owner must reach the directory: /tmp is open to every user.
	tmp=/tmp
fi
as() {
	if [[ -z "$user" ]]; then
		"$@"
	elif command -v setpriv >/dev/null; then
		setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups -- "$@"
	else
		runuser -u "$user" -- "$@"
	fi
}

dir=$(mktemp -d "$tmp/opsgate-pg-XXXXXX")
touch "$dir/.opsgate-pg" # pg-stop.sh removes only directories with this mark
ok=""
cleanup() {
	if [[ -z "$ok" ]]; then
		as "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir"
	fi
}
trap cleanup EXIT
[[ -n "$user" ]] && chown "$user" "$dir"
chmod 700 "$dir"

password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
as sh -c 'umask 077 && cat > "$1"' sh "$dir/pwfile" <<<"$password"
if ! as "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
	--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale --no-sync \
	>"$dir/initdb.log" 2>&1; then
	cat "$dir/initdb.log" >&2
	die "initdb failed"
fi
rm -f "$dir/pwfile"
as sh -c 'cat >> "$1"' sh "$dir/data/postgresql.conf" <<EOC
# pg-start.sh: a throwaway cluster for tests. Nothing here is durable.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 300
shared_buffers = 64MB
EOC

# A free port: one nothing answers on, and that postgres then binds (another
# process may take it in between: then try another). It is taken below the
# kernel's range of ports for outgoing connections, which any connection
# could take while postgres is stopped (the chaos suite stops and starts it).
first=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
low=$((first - 8000))
((low >= 10000)) || low=10000
port=""
for _ in $(seq 1 20); do
	p=$((low + RANDOM % 8000))
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		continue
	fi
	if as "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -o "-p $p" -w -t 60 start >/dev/null 2>&1; then
		port=$p
		break
	fi
	grep -q "could not bind" "$dir/postgres.log" 2>/dev/null || { cat "$dir/postgres.log" >&2; die "postgres did not start"; }
done
[[ -n "$port" ]] || die "found no free port for postgres"
echo "$port" >"$dir/port"
ok=1
echo "pg-start: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port and $dir, data in $dir/data; stop it with: scripts/pg-stop.sh $dir" >&2
printf "export AUTOMATOR_TEST_POSTGRES='postgres://postgres:%s@127.0.0.1:%s/postgres?sslmode=disable'\n" "$password" "$port"
printf "export AUTOMATOR_TEST_PGDIR='%s'\n" "$dir"
