#!/bin/sh
# berth install script: brings this server under management by the berth at
# $BERTH_URL below. Copy the line berth gives you when you add a server:
#
#   curl -fsSL <berth>/api/deploy | BERTH_ENROLL_TOKEN=<enrollment token> sh
#
# as root, or as a user with sudo: the script then fetches itself again from berth
# and runs that copy with sudo, the token on its standard input. The token is in the
# script's environment or standard input, never in its arguments: `ps` does not show it.
#
# Read it before you run it. In order, each step skipped when already done:
#   1. Checks, before changing anything: root; the OS (Debian 12+, Ubuntu 22.04+);
#      the architecture (amd64, arm64); an SSH server; the token with berth.
#   2. Installs Docker (docker.io) and Caddy (caddy) from the distribution's
#      packages if they are missing, and starts Docker.
#   3. Creates the system user `berth` in the group `docker`, with the password
#      field `*` (no password, yet not locked: OpenSSH refuses locked accounts).
#   4. Points Caddy's admin API at the unix socket /run/berth/caddy-admin.sock,
#      which only root, Caddy and the group `berth` can reach, and runs Caddy
#      with --resume so that the configuration berth loads survives restarts
#      (a systemd drop-in for caddy.service: /etc/caddy/Caddyfile goes unused),
#      and sets net.ipv4.tcp_migrate_req=1 so that Caddy's reloads reset no
#      connection.
#   5. Registers this server's SSH host keys and facts with berth, once, with the
#      enrollment token: berth pins the keys before it first connects.
#   6. Authorizes berth's key for `berth` as restrict,port-forwarding,command="/bin/false":
#      it can forward to the Docker and Caddy sockets, it cannot run a command.
#   7. Waits until berth reports the server online, and prints its status.
# Before all that it adds one file to sshd's drop-in directory (sshd_config.d/00-berth.conf,
# checked with sshd -t, then sshd reloaded): a Match block for the user berth alone that
# lets its key forward to local sockets and ports but never listen on this server
# (ssh -R, a TCP port or a unix socket; the key's options cannot refuse the latter).
# Nothing else of the SSH server's configuration changes; it never touches a firewall
# and never deletes data. What it adds is listed in /var/lib/berth/install-state, and
# --uninstall removes exactly that (packages stay: removing Docker would stop your apps).
# Over plain http:// to anything but this machine it stops, unless given --insecure.
#
# Options:
#   --token-stdin    read the enrollment token from the first line of standard input
#                    (when the script is a file: sh install.sh --token-stdin)
#   --token TOKEN    the token as an argument: works, but `ps` shows it; prefer
#                    BERTH_ENROLL_TOKEN=TOKEN in the environment
#   --dry-run        print the plan and change nothing
#   --uninstall      remove what this script added; apps keep running, data stays
#   --purge          with --uninstall: also remove this server's apps: berth's
#                    containers labelled berth.server=<this server's id>, and their
#                    data in /var/lib/berth/apps/<container name>
#   --ssh-port PORT  the port berth connects to (default: the Port sshd listens on,
#                    from `sshd -T`, else 22); behind port forwarding, the outer one
#   --base-url URL   berth's address (default: the one that served this script)
#   --wait SECONDS   how long to wait for `online` (default 120; 0: do not wait)
#   --insecure       go on although berth is at a plain http:// address other than this
#                    machine's (the token and berth's answers then cross the network
#                    unencrypted); berth puts it in the install command it shows then
#   --print-sshd-config  print the sshd block this script adds, and exit (to add it by hand)
#   --help           a summary of the options
# Environment, for tests and unusual machines:
#   BERTH_ENROLL_TOKEN=TOKEN       the server's one-time enrollment token (berth_enroll_...)
#   BERTH_OS_RELEASE=FILE   the os-release file to read (default /etc/os-release)
#   BERTH_SSHD_CONFIG=FILE  the sshd configuration whose host keys, Port and
#                           AuthorizedKeysFile count (default: sshd's own)
#   BERTH_SKIP_SERVICES=1   no systemd (also implied when systemd does not run):
#                           Docker must already run; Caddy is started in the
#                           background, as root, if it does not answer
# Exit status: 0 done (or nothing to do), 1 failed or refused, 2 bad usage.
#
# Everything is in functions and the last line runs them, so a download cut
# short runs nothing.

set -eu

BERTH_URL=@BERTH_URL@

BERTH_USER=berth
STATE_DIR=/var/lib/berth
STATE_FILE=$STATE_DIR/install-state
APPS_DIR=$STATE_DIR/apps
CADDY_HOME=$STATE_DIR/caddy
CONFIG_DIR=/etc/berth
CADDY_CONFIG=$CONFIG_DIR/caddy.json
RUN_DIR=/run/berth
ADMIN_SOCKET=$RUN_DIR/caddy-admin.sock
ADMIN_ORIGIN='caddy-admin'
DROPIN_DIR=/etc/systemd/system/caddy.service.d
DROPIN=$DROPIN_DIR/berth.conf
TMPFILES=/etc/tmpfiles.d/berth.conf
CADDY_LOG=/var/log/berth-caddy.log
SYSCTL_CONF=/etc/sysctl.d/90-berth-caddy.conf
MIGRATE_REQ=/proc/sys/net/ipv4/tcp_migrate_req
DOCKER_SOCKET=/var/run/docker.sock
RESTRICTIONS=@KEY_RESTRICTIONS@
OS_RELEASE=${BERTH_OS_RELEASE:-/etc/os-release}
SSHD_CONFIG=${BERTH_SSHD_CONFIG:-}
SSHD_DROPIN_NAME=00-berth.conf
SSHD_DROPIN=""

TOKEN=${BERTH_ENROLL_TOKEN:-}
TOKEN_ARG=0
TOKEN_STDIN=0
SCRIPT_URL=$BERTH_URL
DRY_RUN=0
UNINSTALL=0
PURGE=0
SSH_PORT=""
SSH_PORT_GIVEN=0
WAIT_SECONDS=120
CHANGES=0
WORK=""
HOST_KEY_FILE=""
CREDENTIAL=""
BASE_URL_GIVEN=0
INSECURE=0

# -- output -------------------------------------------------------------------------

say() { printf 'berth: %s\n' "$*"; }
ok() { printf 'berth: ok: %s\n' "$*"; }
warn() { printf 'berth: warning: %s\n' "$*" >&2; }
die() {
  printf 'berth: error: %s\n' "$*" >&2
  exit 1
}
usage_error() {
  printf 'berth: %s (see --help)\n' "$*" >&2
  exit 2
}

usage() {
  cat <<EOF
Usage: curl -fsSL $BERTH_URL/api/deploy | BERTH_ENROLL_TOKEN=<enrollment token> sh [-s -- options]
       curl -fsSL $BERTH_URL/api/deploy | sh -s -- --uninstall [--purge] [--dry-run]
As root, or as a user with sudo (the script then runs itself with sudo).

Brings this server under management by berth at $BERTH_URL: Docker and Caddy
from the distribution's packages, a system user berth whose SSH key can only
forward, and this server's SSH host keys registered with berth.

  --token-stdin    read the enrollment token from standard input (a script file)
  --token TOKEN    the token as an argument (ps shows it; prefer BERTH_ENROLL_TOKEN)
  --dry-run        print the plan and change nothing
  --uninstall      remove what this script added; apps keep running, data stays
  --purge          with --uninstall: also remove berth's containers and their data
  --ssh-port PORT  the port berth connects to (default: sshd's Port, else 22)
  --base-url URL   berth's address (default: $BERTH_URL)
  --wait SECONDS   how long to wait for the server to be online (default 120)
  --insecure       go on over plain http:// to another machine (token and key unencrypted)
  --print-sshd-config  print the sshd block for the user berth this script adds, and exit
EOF
}

# The sshd block this script adds (to sshd's drop-in directory) for the user berth: its key
# may forward to local sockets (Docker's, Caddy's) and ports (health checks), but never
# listen on this server: not a TCP port (the key's permitlisten refuses that too), nor a
# unix socket (no option of the key can refuse that: ssh -R /path:...).
sshd_block() {
  cat <<EOF
# Added by berth's install script; --uninstall removes it. berth's key forwards to
# Docker's and Caddy's sockets and to local ports; it never listens on this server.
Match User $BERTH_USER
    AllowTcpForwarding local
    AllowStreamLocalForwarding local
    PermitListen none
EOF
}

# A change about to be made: says so and returns 0, or in --dry-run says what it
# would do and returns 1. Use as `if change "..."; then ...; fi`.
change() {
  if [ "$DRY_RUN" = 1 ]; then
    say "would $*"
    return 1
  fi
  say "$*"
  CHANGES=$((CHANGES + 1))
  return 0
}

# -- arguments ------------------------------------------------------------------------

need_value() {
  [ "$#" -ge 2 ] || usage_error "$1 needs a value"
}

parse_args() {
  while [ "$#" -gt 0 ]; do
    case $1 in
      --token) need_value "$@"; TOKEN=$2; TOKEN_ARG=1; shift 2 ;;
      --token=*) TOKEN=${1#*=}; TOKEN_ARG=1; shift ;;
      --token-stdin) TOKEN_STDIN=1; shift ;;
      --dry-run) DRY_RUN=1; shift ;;
      --uninstall) UNINSTALL=1; shift ;;
      --purge) PURGE=1; shift ;;
      --ssh-port) need_value "$@"; SSH_PORT=$2; SSH_PORT_GIVEN=1; shift 2 ;;
      --ssh-port=*) SSH_PORT=${1#*=}; SSH_PORT_GIVEN=1; shift ;;
      --base-url) need_value "$@"; BERTH_URL=$2; BASE_URL_GIVEN=1; shift 2 ;;
      --base-url=*) BERTH_URL=${1#*=}; BASE_URL_GIVEN=1; shift ;;
      --wait) need_value "$@"; WAIT_SECONDS=$2; shift 2 ;;
      --wait=*) WAIT_SECONDS=${1#*=}; shift ;;
      --insecure) INSECURE=1; shift ;;
      --print-sshd-config) sshd_block; exit 0 ;;
      -h | --help) usage; exit 0 ;;
      *) usage_error "unknown option: $1" ;;
    esac
  done
  if [ "$PURGE" = 1 ] && [ "$UNINSTALL" = 0 ]; then
    usage_error "--purge goes with --uninstall"
  fi
  if [ -n "$SSH_PORT" ]; then
    if ! is_number "$SSH_PORT" || [ "$SSH_PORT" -lt 1 ] || [ "$SSH_PORT" -gt 65535 ]; then
      usage_error "--ssh-port takes a port number from 1 to 65535"
    fi
  fi
  is_number "$WAIT_SECONDS" || usage_error "--wait takes whole seconds"
  [ "$UNINSTALL" = 0 ] || return 0
  case $BERTH_URL in
    http://?* | https://?*) ;;
    *) usage_error "--base-url takes an http:// or https:// address" ;;
  esac
  case $BERTH_URL in
    *[[:space:]]* | *[\"\'\`\\]*) usage_error "--base-url: not a URL: $BERTH_URL" ;;
  esac
  BERTH_URL=${BERTH_URL%/}
  if [ "$TOKEN_STDIN" = 1 ]; then
    IFS= read -r TOKEN || [ -n "$TOKEN" ] || usage_error "--token-stdin: nothing on standard input"
  fi
  [ -n "$TOKEN" ] || usage_error "the enrollment token is required: BERTH_ENROLL_TOKEN=<enrollment token> in the environment (berth shows the command when you add a server)"
  check_token_format
  if [ "$TOKEN_ARG" = 1 ]; then
    warn "the token given with --token is visible to every user of this machine (ps) while this runs; berth's install command passes it as BERTH_ENROLL_TOKEN instead"
  fi
}

is_number() {
  case $1 in
    '' | *[!0-9]*) return 1 ;;
    *) return 0 ;;
  esac
}

check_token_format() {
  body=${TOKEN#berth_enroll_}
  case $TOKEN in
    berth_enroll_*) ;;
    *) die "that is not an enrollment token: it starts with berth_enroll_ (an API token cannot enroll a server)" ;;
  esac
  case $body in
    *[!0-9A-Za-z]*) die "the enrollment token is mistyped: after berth_enroll_ come 49 letters and digits" ;;
  esac
  [ "${#body}" -eq 49 ] || die "the enrollment token is truncated or mistyped: after berth_enroll_ come 49 letters and digits"
}

# -- the state file: what this script added, one key=value per line ------------------------

state_get() {
  if [ -f "$STATE_FILE" ]; then
    sed -n "s/^$1=//p" "$STATE_FILE" | head -n 1
  fi
}

state_set() {
  if [ -f "$STATE_FILE" ] && [ "$(state_get "$1")" = "$2" ] && grep -q "^$1=" "$STATE_FILE"; then
    return 0
  fi
  mkdir -p "$STATE_DIR"
  tmp=$(mktemp "$STATE_DIR/.install-state.XXXXXX")
  {
    if [ -f "$STATE_FILE" ]; then
      grep -v "^$1=" "$STATE_FILE" || true
    else
      echo "# What berth's install script added to this machine; --uninstall removes exactly this."
      echo "# Written by the script: do not edit."
    fi
    printf '%s=%s\n' "$1" "$2"
  } >"$tmp"
  chmod 0600 "$tmp"
  mv "$tmp" "$STATE_FILE"
}

# -- small helpers ----------------------------------------------------------------------

# An os-release field, unquoted.
os_field() {
  sed -n "s/^$1=//p" "$OS_RELEASE" | head -n 1 | sed -e 's/^"\(.*\)"$/\1/' -e "s/^'\(.*\)'\$/\1/"
}

# A string for a JSON document: no control characters, \ and " escaped.
json_escape() {
  printf '%s' "$1" | tr -d '\000-\037\177' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

# A whole-number field of a flat JSON object in FILE.
json_number() {
  sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" "$2" | head -n 1
}

# A string field of a flat JSON object in FILE (berth's answers have no escaped quotes
# in the fields read here).
json_field() {
  sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" "$2" | head -n 1
}

# METHOD PATH [BODY_FILE]: calls berth with the enrollment token, or $CREDENTIAL when set
# (given to curl on its standard input, never on a command line); prints the HTTP status,
# 000 if berth could not be reached. The answer's body is in $WORK/response.
api() {
  set -- "$1" "$2" "${3:-}"
  if [ -n "$3" ]; then
    set -- -X "$1" -H 'Content-Type: application/json' --data-binary "@$3" "$BERTH_URL$2"
  else
    set -- -X "$1" "$BERTH_URL$2"
  fi
  code=$(printf 'header = "Authorization: Bearer %s"\n' "${CREDENTIAL:-$TOKEN}" |
    curl -sS --connect-timeout 10 --max-time 30 -K - -o "$WORK/response" -w '%{http_code}' "$@") ||
    code=000
  case $code in
    [1-5][0-9][0-9]) printf '%s' "$code" ;;
    *) printf '000' ;;
  esac
}

# METHOD PATH: a request signed with this server's SSH host key ($HOST_KEY_FILE), which
# berth pinned at enrollment: how the script speaks to berth once the token is spent.
# Prints the HTTP status; 000 also when it cannot sign.
signed_api() {
  now=$(date +%s)
  printf 'berth-server-request\n%s\n%s\n%s\n%s\n' "$1" "$2" "$SERVER_ID" "$now" >"$WORK/request"
  rm -f "$WORK/request.sig"
  if [ -z "$HOST_KEY_FILE" ] ||
    ! ssh-keygen -Y sign -q -f "$HOST_KEY_FILE" -n berth-server@berth "$WORK/request" \
      </dev/null >"$WORK/sign.log" 2>&1; then
    printf 'cannot sign with the host key %s: %s\n' "${HOST_KEY_FILE:-(none)}" \
      "$(head -c 300 "$WORK/sign.log" 2>/dev/null)" >"$WORK/response"
    printf '000'
    return 0
  fi
  CREDENTIAL="berth_sig.$SERVER_ID.$now.$(sed -e '1d' -e '$d' "$WORK/request.sig" | tr -d '\n')"
  api "$1" "$2"
}

token_hash() {
  printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1
}

docker_answers() {
  [ -S "$DOCKER_SOCKET" ] &&
    curl -fsS --max-time 5 --unix-socket "$DOCKER_SOCKET" -o /dev/null http://docker/_ping </dev/null 2>/dev/null
}

caddy_answers() {
  [ -S "$ADMIN_SOCKET" ] &&
    curl -fsS --max-time 5 --unix-socket "$ADMIN_SOCKET" -H "Host: $ADMIN_ORIGIN" -o /dev/null \
      "http://$ADMIN_ORIGIN/config/" </dev/null 2>/dev/null
}

# PATH MODE OWNER CONTENT STATE_KEY WHAT: the file holds exactly CONTENT (and a newline),
# with MODE and OWNER; says what it does. Sets WROTE=1 when it wrote.
ensure_file() {
  WROTE=0
  if [ -f "$1" ] && [ "$(cat "$1")" = "$4" ]; then
    ensure_owner "$1" "$2" "$3" "$6"
    return 0
  fi
  if [ -e "$1" ]; then
    change "rewrite $1 ($6)" || return 0
  else
    change "write $1 ($6)" || return 0
  fi
  dir=$(dirname "$1")
  if [ ! -d "$dir" ]; then
    mkdir -p "$dir"
    state_set "$5_dir" "$dir"
  fi
  state_set "$5" "$1"
  tmp=$(mktemp "$1.XXXXXX")
  printf '%s\n' "$4" >"$tmp"
  chmod "$2" "$tmp"
  chown "$3" "$tmp"
  mv "$tmp" "$1"
  WROTE=1
}

# PATH MODE OWNER STATE_KEY WHAT: a directory with MODE and OWNER (user:group).
ensure_dir() {
  if [ -d "$1" ]; then
    ensure_owner "$1" "$2" "$3" "$5"
  elif change "create $1 ($5; mode $2, owner $3)"; then
    state_set "$4" "$1"
    mkdir -p "$1"
    chown "$3" "$1"
    chmod "$2" "$1"
  fi
}

ensure_owner() {
  want="$(echo "$2" | sed 's/^0*//') $3"
  have=$(stat -c '%a %U:%G' "$1")
  [ "$have" = "$want" ] && return 0
  if change "set mode $2 and owner $3 on $1 ($4)"; then
    chown "$3" "$1"
    chmod "$2" "$1"
  fi
}

# -- checks: nothing changes before all of them pass ------------------------------------------

check_root() {
  [ "$(id -u)" = 0 ] || die "run this as root (or as a user with sudo)"
}

# Not root: fetch this script again from berth and run that copy with sudo, the token
# on its standard input (sudo clears the environment, and an argument would show in ps).
# Root (a root-only machine has no sudo): nothing to do.
elevate() {
  [ "$(id -u)" != 0 ] || return 0
  command -v sudo >/dev/null 2>&1 ||
    die "run this as root: this machine has no sudo. Log in as root (su -) and run the same command."
  # From where this server reaches berth: --base-url if given, else where it came from.
  [ "$BASE_URL_GIVEN" = 1 ] || BERTH_URL=$SCRIPT_URL
  say "not root: fetching this script again from $BERTH_URL/api/deploy to run it with sudo"
  curl -fsSL --max-time 60 -o "$WORK/install.sh" "$BERTH_URL/api/deploy" </dev/null ||
    die "cannot fetch $BERTH_URL/api/deploy"
  if [ -n "$TOKEN" ]; then
    status=0
    printf '%s\n' "$TOKEN" | sudo sh "$WORK/install.sh" --token-stdin "$@" || status=$?
  else
    status=0
    sudo sh "$WORK/install.sh" "$@" || status=$?
  fi
  exit "$status"
}

check_os() {
  [ -r "$OS_RELEASE" ] ||
    die "cannot read $OS_RELEASE to tell the OS; this script supports Debian 12+ and Ubuntu 22.04+"
  OS_ID=$(os_field ID)
  OS_VERSION=$(os_field VERSION_ID)
  OS_NAME=$(os_field PRETTY_NAME)
  [ -n "$OS_NAME" ] || OS_NAME="$OS_ID $OS_VERSION"
  major=${OS_VERSION%%.*}
  case $OS_ID in
    debian) minimum=12 ;;
    ubuntu) minimum=22 ;;
    *)
      die "$OS_NAME is not supported: this script sets up Debian 12 or later and Ubuntu 22.04 or later (it installs Docker and Caddy with apt-get). Nothing was changed. On another Linux, install Docker and Caddy yourself and add the server with its host keys (see berth's docs, docs/guide/servers.md, \"Adding a server over SSH, by hand\")."
      ;;
  esac
  if [ -n "$major" ]; then # testing and unstable have no VERSION_ID
    if ! is_number "$major" || [ "$major" -lt "$minimum" ]; then
      die "$OS_NAME is too old: this script needs Debian 12 (the first with a caddy package) or Ubuntu 22.04 or later. Nothing was changed."
    fi
  fi
}

check_arch() {
  ARCH=$(uname -m)
  case $ARCH in
    x86_64 | amd64 | aarch64 | arm64) ;;
    *) die "the $ARCH architecture is not supported: berth supports amd64 (x86_64) and arm64 (aarch64). Nothing was changed." ;;
  esac
}

check_tools() {
  command -v curl >/dev/null 2>&1 || die "curl is needed (apt-get install curl)"
  command -v ssh-keygen >/dev/null 2>&1 ||
    die "ssh-keygen is needed to sign this server's requests to berth (apt-get install openssh-client). Nothing was changed."
  if [ "${BERTH_SKIP_SERVICES:-0}" = 1 ] || [ ! -d /run/systemd/system ]; then
    SYSTEMD=0
  else
    SYSTEMD=1
  fi
  if [ "$SYSTEMD" = 1 ] && command -v caddy >/dev/null 2>&1 &&
    ! systemctl cat caddy.service >/dev/null 2>&1; then
    die "Caddy is installed but there is no caddy.service (a package's); install Debian's caddy package, or run with BERTH_SKIP_SERVICES=1. Nothing was changed."
  fi
}

# sshd's effective configuration: its Port, host keys and AuthorizedKeysFile.
read_sshd() {
  SSHD=$(command -v sshd 2>/dev/null || echo /usr/sbin/sshd)
  [ -x "$SSHD" ] ||
    die "no SSH server: berth reaches this server over SSH. Install openssh-server first. Nothing was changed."
  if [ -n "$SSHD_CONFIG" ]; then
    SSHD_T=$("$SSHD" -T -f "$SSHD_CONFIG" </dev/null 2>&1) || die "sshd -T -f $SSHD_CONFIG failed: $SSHD_T"
  else
    SSHD_T=$("$SSHD" -T </dev/null 2>/dev/null) || SSHD_T=""
  fi
  DETECTED_PORT=$(printf '%s\n' "$SSHD_T" | awk '$1 == "port" { print $2; exit }')
  is_number "$DETECTED_PORT" || DETECTED_PORT=22
  [ -n "$SSH_PORT" ] || SSH_PORT=$DETECTED_PORT
  KEYS_PATTERN=$(printf '%s\n' "$SSHD_T" | awk '$1 == "authorizedkeysfile" { print $2; exit }')
  [ -n "$KEYS_PATTERN" ] || KEYS_PATTERN=.ssh/authorized_keys
  case $KEYS_PATTERN in
    none) die "sshd reads no authorized_keys file (AuthorizedKeysFile none), so berth's key cannot be authorized. Nothing was changed." ;;
    *%%*) die "sshd's AuthorizedKeysFile $KEYS_PATTERN is beyond this script; authorize berth's key by hand. Nothing was changed." ;;
  esac
  key_files=$(printf '%s\n' "$SSHD_T" | awk '$1 == "hostkey" { print $2 }')
  if [ -z "$key_files" ]; then
    for f in /etc/ssh/ssh_host_*_key; do
      if [ -e "$f" ]; then
        key_files="$key_files$f
"
      fi
    done
  fi
  HOST_KEYS=""
  count=0
  old_ifs=$IFS
  IFS='
'
  set -f
  for f in $key_files; do
    if [ -r "$f.pub" ]; then
      pub=$(awk '{ print $1 " " $2; exit }' "$f.pub")
    else
      pub=$(ssh-keygen -y -f "$f" </dev/null 2>/dev/null | awk '{ print $1 " " $2; exit }') || pub=""
    fi
    if printf '%s\n' "$pub" |
      grep -Eq '^(ssh-ed25519|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|ssh-rsa) [A-Za-z0-9+/]+=*$' &&
      [ "$count" -lt 10 ]; then
      HOST_KEYS="$HOST_KEYS$pub
"
      count=$((count + 1))
      if [ -r "$f" ]; then # the key this script signs its requests to berth with
        case $pub in
          'ssh-ed25519 '*) HOST_KEY_FILE=$f ;;
          *) [ -n "$HOST_KEY_FILE" ] || HOST_KEY_FILE=$f ;;
        esac
      fi
    fi
  done
  set +f
  IFS=$old_ifs
  [ -n "$HOST_KEYS" ] || die "found no SSH host public key (sshd -T lists none readable). Nothing was changed."
  check_forwarding
}

# sshd's settings for user berth (Match blocks applied, with sshd -T -C): the forwards
# berth needs are a stream-local one to Docker's and Caddy's sockets and direct TCP to
# 127.0.0.1. A hardened sshd refuses them; stop here, naming each setting to change,
# rather than end with a server berth cannot reach.
check_forwarding() {
  for_berth=$(sshd_for_berth)
  [ -n "$for_berth" ] || for_berth=$SSHD_T
  [ -n "$for_berth" ] || return 0
  setting() { printf '%s\n' "$for_berth" | awk -v k="$1" '$1 == k { print $2; exit }'; }
  problems=""
  case $(setting allowtcpforwarding) in
    no | remote) problems="$problems
  AllowTcpForwarding $(setting allowtcpforwarding): set it to local (or yes); with Debian's OpenSSH it also refuses the forward to Docker's socket" ;;
  esac
  case $(setting allowstreamlocalforwarding) in
    no | remote) problems="$problems
  AllowStreamLocalForwarding $(setting allowstreamlocalforwarding): set it to local (or yes); berth reaches Docker's socket by a stream-local forward" ;;
  esac
  if [ "$(setting disableforwarding)" = yes ]; then
    problems="$problems
  DisableForwarding yes: set it to no; it refuses every forward, and berth's key only forwards"
  fi
  permit_open=$(setting permitopen)
  case $permit_open in
    '' | any) ;;
    *) problems="$problems
  PermitOpen $permit_open: set it to any; any other value also refuses the forward to Docker's socket" ;;
  esac
  [ -n "$problems" ] || return 0
  die "sshd ($([ -n "$SSHD_CONFIG" ] && echo "$SSHD_CONFIG" || echo "its configuration")) refuses the forwards berth's key needs (for the user $BERTH_USER):$problems
Change it for $BERTH_USER alone if you like, at the end of sshd_config:
  Match User $BERTH_USER
    AllowTcpForwarding local
    AllowStreamLocalForwarding local
    PermitListen none
    DisableForwarding no
    PermitOpen any
then reload sshd (systemctl reload ssh) and run this command again. berth's key stays restricted: it cannot run a command nor listen (see berth's docs/security.md). Nothing was changed."
}

# sshd -T for the user berth (Match blocks applied), or nothing if sshd cannot tell.
sshd_for_berth() {
  if [ -n "$SSHD_CONFIG" ]; then set -- -f "$SSHD_CONFIG"; else set --; fi
  for match in "user=$BERTH_USER" "user=$BERTH_USER,host=localhost,addr=127.0.0.1"; do
    if "$SSHD" -T "$@" -C "$match" </dev/null 2>/dev/null; then return 0; fi
  done
  return 0
}

berth_setting() {
  sshd_for_berth | awk -v k="$1" '$1 == k { print $2; exit }'
}

# The directory sshd reads drop-ins from: DIR of an `Include DIR/*.conf` in its main
# configuration (Debian's and Ubuntu's: /etc/ssh/sshd_config.d); nothing if there is none.
sshd_dropin_dir() {
  awk 'tolower($1) == "include" { for (i = 2; i <= NF; i++) print $i }' \
    "${SSHD_CONFIG:-/etc/ssh/sshd_config}" 2>/dev/null |
    while IFS= read -r pattern; do
      case $pattern in /*) ;; *) pattern=/etc/ssh/$pattern ;; esac
      dir=${pattern%/\*.conf}
      case $dir in
        "$pattern" | *[*?[]*) ;;
        *)
          printf '%s' "$dir"
          break
          ;;
      esac
    done
}

# berth's key must not listen on this server: the block this script adds to sshd's drop-in
# directory says so for the user berth. Without such a directory, sshd may say so already
# (added by hand); else stop here, with the block to add, before anything changes.
check_sshd_block() {
  dir=$(sshd_dropin_dir)
  if [ -n "$dir" ]; then
    SSHD_DROPIN=$dir/$SSHD_DROPIN_NAME
    return 0
  fi
  if [ "$(berth_setting allowtcpforwarding)" = local ] &&
    [ "$(berth_setting allowstreamlocalforwarding)" = local ]; then
    return 0
  fi
  die "sshd's configuration (${SSHD_CONFIG:-/etc/ssh/sshd_config}) includes no drop-in directory (Include /etc/ssh/sshd_config.d/*.conf, as Debian's and Ubuntu's do), where this script adds the block that keeps berth's key from listening on this server. Add the Include line at its top, or add this at its end yourself:
$(sshd_block | sed 's/^/  /')
then reload sshd (systemctl reload ssh) and run this command again. Nothing was changed."
}

# berth's address over plain HTTP is fine on this machine; to any other, the token and
# berth's answers (the key this server will trust for berth) would cross networks
# unencrypted: stop, unless --insecure says the networks between are trusted. A name
# counts by what it resolves to.
check_plain_http() {
  case $BERTH_URL in
    http://*) ;;
    *) return 0 ;;
  esac
  host=${BERTH_URL#http://}
  host=${host%%/*}
  case $host in
    \[*) host=${host#\[} && host=${host%%\]*} ;;
    *) host=${host%:*} ;;
  esac
  address=$host
  case $host in
    *[!0-9.]* | '') # a name or an IPv6 address
      case $host in *:*) ;; *) address=$(getent ahosts "$host" 2>/dev/null | awk '{ print $1; exit }') ;; esac
      ;;
  esac
  case $address in
    127.* | ::1) return 0 ;;
  esac
  where="$( [ "$address" = "$host" ] || printf '%s, ' "$host")${address:-an address that does not resolve}"
  if [ "$INSECURE" = 1 ]; then
    warn "berth is at $BERTH_URL: plain HTTP to $where, which is not this machine; going on as --insecure asks. The enrollment token and berth's answers (the key this server will trust for berth) cross the network unencrypted."
    return 0
  fi
  die "berth is at $BERTH_URL: plain HTTP to $where, which is not this machine. The enrollment token and berth's answers (the key this server will trust for berth) would cross the network unencrypted, where they can be read or changed. Put berth behind HTTPS (a reverse proxy with a certificate; BERTH_BASE_URL=https://...) and use the https:// command, or, if every network between this server and berth is yours, run the same command with --insecure (... | sh -s -- --insecure). Nothing was changed."
}

# The token with berth, before anything changes: pending (enroll), enrolled from this
# machine before (resume), or refused.
check_token() {
  code=$(api GET /api/agent/servers/enroll)
  case $code in
    200) ;;
    401)
      if [ -n "$(state_get server_id)" ] && [ "$(state_get token_sha256)" = "$(token_hash)" ]; then
        resume_enrolled
        return 0
      fi
      die "berth refused the enrollment token: it is unknown, already used, or has expired (a token enrolls one server, once, within an hour). Add the server again in berth (dashboard, or POST /api/agent/servers) and run the new install command. Nothing was changed."
      ;;
    000) die "cannot reach berth at $BERTH_URL (see curl's message above); if this server reaches berth at another address, pass --base-url. Nothing was changed." ;;
    *) die "berth answered HTTP $code to the token check: $(head -c 300 "$WORK/response"). Nothing was changed." ;;
  esac
  SERVER_ID=$(json_field serverId "$WORK/response")
  status=$(json_field status "$WORK/response")
  berth_port=$(json_number sshPort "$WORK/response")
  enrolled_here=$(state_get server_id)
  if [ "$status" = pending ]; then
    if [ -n "$enrolled_here" ] && [ "$enrolled_here" != "$SERVER_ID" ]; then
      die "this machine is already enrolled as server $enrolled_here. Run with --uninstall first to enroll it as another server. Nothing was changed."
    fi
    check_ssh_port "$berth_port"
    NEEDS_ENROLLMENT=1
  elif [ "$enrolled_here" = "$SERVER_ID" ]; then
    NEEDS_ENROLLMENT=0
  else
    die "this enrollment token was already used: server $SERVER_ID is enrolled ($status). A token enrolls one server once; add the server again in berth for a new one. Nothing was changed."
  fi
}

# The SSH port berth was given when the server was added (22 when none was) wins over
# sshd's Port: a different one is refused here, before anything changes (berth would
# refuse it at enrollment too). With 22, the port this script registers replaces it.
check_ssh_port() {
  if [ "$SSH_PORT_GIVEN" = 1 ]; then how="--ssh-port $SSH_PORT"; else how="the Port sshd listens on"; fi
  if is_number "$1" && [ "$1" != 22 ] && [ "$1" != "$SSH_PORT" ]; then
    die "berth has this server at SSH port $1 (given when it was added), but this script would register port $SSH_PORT ($how). Run the install command exactly as berth shows it (it carries --ssh-port $1), or add the server again in berth with the port it should use. Nothing was changed."
  fi
  if [ "$SSH_PORT_GIVEN" = 1 ] && [ "$SSH_PORT" != "$DETECTED_PORT" ]; then
    say "note: berth will connect to port $SSH_PORT; sshd here listens on $DETECTED_PORT (port forwarding from $SSH_PORT to $DETECTED_PORT is needed)"
  fi
}

# The token already enrolled this machine (a second run of the same command): carry on
# as that server, which berth must still know (asked with a signed request).
resume_enrolled() {
  SERVER_ID=$(state_get server_id)
  saved=$(state_get host_key_file)
  [ -z "$saved" ] || HOST_KEY_FILE=$saved
  code=$(signed_api GET /api/agent/servers/self)
  case $code in
    200) ;;
    000) die "cannot reach berth at $BERTH_URL: $(head -c 300 "$WORK/response"). Nothing was changed." ;;
    *) die "berth does not know this machine as server $SERVER_ID any more (HTTP $code). Run with --uninstall, then add the server again in berth. Nothing was changed." ;;
  esac
  status=$(json_field status "$WORK/response")
  [ "$status" != removed ] ||
    die "berth lists server $SERVER_ID as removed. Run with --uninstall, then add the server again in berth. Nothing was changed."
  NEEDS_ENROLLMENT=0
}

# -- installing ---------------------------------------------------------------------------

# The Match block for the user berth in sshd's drop-in directory; checked with sshd -t and
# shown to take effect before sshd is reloaded (a reloaded sshd with a broken configuration
# would exit). If either fails, the file goes again and the script stops.
step_sshd() {
  if [ -z "$SSHD_DROPIN" ]; then
    ok "sshd keeps berth's key from listening (its configuration says so for $BERTH_USER)"
    return 0
  fi
  ensure_file "$SSHD_DROPIN" 0644 root:root "$(sshd_block)" sshd_dropin \
    "sshd: berth's key may forward to local sockets and ports, never listen on this server"
  [ "$WROTE" = 1 ] || return 0
  [ -z "$SSHD_CONFIG" ] || state_set sshd_config "$SSHD_CONFIG"
  if [ -n "$SSHD_CONFIG" ]; then set -- -f "$SSHD_CONFIG"; else set --; fi
  if ! "$SSHD" -t "$@" </dev/null >"$WORK/sshd-t.log" 2>&1; then
    rm -f "$SSHD_DROPIN"
    die "sshd rejects its configuration with $SSHD_DROPIN in it ($(head -c 300 "$WORK/sshd-t.log")); the file was removed again and sshd not reloaded."
  fi
  if [ "$(berth_setting allowstreamlocalforwarding)" != local ] ||
    [ "$(berth_setting allowtcpforwarding)" != local ]; then
    rm -f "$SSHD_DROPIN"
    die "$SSHD_DROPIN does not take effect: another Match block for $BERTH_USER comes first in sshd's configuration. Set AllowTcpForwarding local, AllowStreamLocalForwarding local and PermitListen none there, reload sshd, and run this command again. The file was removed again."
  fi
  reload_sshd
}

# sshd reads its configuration anew (SIGHUP: the sessions it serves go on): the unit's
# reload under systemd, else a signal to the sshd whose PidFile `sshd -T` names.
reload_sshd() {
  if [ "$SYSTEMD" = 1 ] && [ -z "$SSHD_CONFIG" ]; then
    for unit in ssh.service sshd.service; do
      if systemctl cat "$unit" >/dev/null 2>&1; then
        if systemctl try-reload-or-restart "$unit" </dev/null; then
          ok "sshd reloaded ($unit)"
          return 0
        fi
        break
      fi
    done
  else
    pid=$(sshd_pid)
    if is_number "$pid" && kill -HUP "$pid" 2>/dev/null; then
      ok "sshd reloaded (pid $pid)"
      return 0
    fi
  fi
  warn "could not reload sshd: reload it (systemctl reload ssh) so that it reads $SSHD_DROPIN"
}

# The pid of the sshd whose configuration counts (from the PidFile in `sshd -T`).
sshd_pid() {
  if [ -n "$SSHD_CONFIG" ]; then set -- -f "$SSHD_CONFIG"; else set --; fi
  sshd=$(command -v sshd 2>/dev/null || echo /usr/sbin/sshd)
  pidfile=$("$sshd" -T "$@" </dev/null 2>/dev/null | awk '$1 == "pidfile" { print $2; exit }')
  cat "${pidfile:-/run/sshd.pid}" 2>/dev/null || true
}

step_packages() {
  missing=""
  command -v dockerd >/dev/null 2>&1 || missing="docker.io"
  command -v caddy >/dev/null 2>&1 || missing="${missing:+$missing }caddy"
  if [ -z "$missing" ]; then
    ok "Docker and Caddy are installed"
    return 0
  fi
  change "install $missing with apt-get, from $OS_NAME's packages" || return 0
  installed=$(state_get installed_packages)
  state_set installed_packages "${installed:+$installed }$missing"
  DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null || die "apt-get update failed"
  # shellcheck disable=SC2086 # one word per package
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing </dev/null ||
    die "apt-get install $missing failed"
}

step_docker() {
  if docker_answers; then
    ok "Docker answers on $DOCKER_SOCKET"
    return 0
  fi
  if [ "$SYSTEMD" = 1 ]; then
    change "enable and start Docker (systemctl enable --now docker)" || return 0
    systemctl enable --now docker </dev/null
    wait_for docker_answers 30 || die "Docker does not answer on $DOCKER_SOCKET; see journalctl -u docker"
  else
    warn "Docker does not answer on $DOCKER_SOCKET and systemd is not in use: start dockerd yourself, berth deploys through it"
  fi
}

step_user() {
  if ! id "$BERTH_USER" >/dev/null 2>&1; then
    getent group docker >/dev/null 2>&1 || [ "$DRY_RUN" = 1 ] ||
      die "there is no group docker (it comes with Docker's package)"
    if change "create the system user $BERTH_USER in the group docker (password field *: no password, not locked; shell nologin)"; then
      state_set created_user 1
      useradd --system --user-group --create-home --shell "$(command -v nologin || echo /usr/sbin/nologin)" \
        --groups docker "$BERTH_USER" </dev/null
      usermod -p '*' "$BERTH_USER"
    fi
    return 0
  fi
  if id -nG "$BERTH_USER" | tr ' ' '\n' | grep -qx docker; then
    ok "user $BERTH_USER exists, in the group docker"
  elif change "add the user $BERTH_USER to the group docker"; then
    state_set added_to_docker_group 1
    usermod -aG docker "$BERTH_USER"
  fi
  case $(getent shadow "$BERTH_USER" | cut -d: -f2) in
    '!'*)
      if change "unlock $BERTH_USER's password field (*: still no password; OpenSSH refuses locked accounts)"; then
        state_set unlocked_user 1
        usermod -p '*' "$BERTH_USER"
      fi
      ;;
  esac
}

step_caddy() {
  if id caddy >/dev/null 2>&1 && [ "$SYSTEMD" = 1 ]; then caddy_user=caddy; else caddy_user=root; fi
  berth_group=$BERTH_USER
  caddy=$(command -v caddy 2>/dev/null || echo /usr/bin/caddy)
  restart=0

  # Only the first start reads it: then --resume loads what berth last loaded.
  ensure_file "$CADDY_CONFIG" 0644 root:root \
    "{\"admin\":{\"listen\":\"unix/$ADMIN_SOCKET\",\"origins\":[\"$ADMIN_ORIGIN\"]}}" \
    caddy_config "Caddy's first configuration: its admin API on $ADMIN_SOCKET, nothing else"
  ensure_dir "$STATE_DIR" 0755 root:root state_dir "berth's directory"
  ensure_dir "$CADDY_HOME" 0750 "$caddy_user:$caddy_user" caddy_home \
    "where Caddy saves the configuration berth loads, for --resume"
  if [ "$SYSTEMD" = 1 ]; then
    ensure_file "$TMPFILES" 0644 root:root "d $RUN_DIR 2750 $caddy_user $BERTH_USER -" \
      tmpfiles "recreates $RUN_DIR at boot"
    if [ "$WROTE" = 1 ]; then
      state_set run_dir "$RUN_DIR"
      systemd-tmpfiles --create "$TMPFILES" </dev/null
    fi
    ensure_dir "$RUN_DIR" 2750 "$caddy_user:$berth_group" run_dir "the admin socket's directory"
    ensure_file "$DROPIN" 0644 root:root "# Added by berth's install script; --uninstall removes it.
[Service]
Environment=XDG_CONFIG_HOME=$CADDY_HOME
UMask=0007
ExecStart=
ExecStart=$caddy run --environ --resume --config $CADDY_CONFIG
ExecReload=" caddy_dropin "runs Caddy with berth's configuration, kept across restarts"
    if [ "$WROTE" = 1 ]; then
      systemctl daemon-reload </dev/null
      restart=1
    fi
    if [ "$(systemctl is-enabled caddy 2>/dev/null)" != enabled ]; then
      if change "enable Caddy at boot (systemctl enable caddy)"; then
        state_set enabled_caddy 1
        systemctl enable caddy </dev/null
      fi
    fi
    if [ "$restart" = 1 ] || ! caddy_answers; then
      if change "restart Caddy (systemctl restart caddy)"; then
        systemctl restart caddy </dev/null
      fi
    fi
  else
    ensure_dir "$RUN_DIR" 2750 "root:$berth_group" run_dir "the admin socket's directory"
    if ! caddy_answers; then
      stop_recorded_caddy
      if change "start Caddy in the background (no systemd; log $CADDY_LOG)"; then
        [ -e "$CADDY_LOG" ] || state_set caddy_log "$CADDY_LOG"
        old_umask=$(umask)
        umask 0007
        XDG_CONFIG_HOME=$CADDY_HOME setsid "$caddy" run --resume --config "$CADDY_CONFIG" \
          >>"$CADDY_LOG" 2>&1 </dev/null &
        state_set caddy_pid "$!"
        umask "$old_umask"
      fi
    fi
  fi
  step_migrate_req
  if [ "$DRY_RUN" = 1 ]; then return 0; fi
  wait_for caddy_answers 30 || die "Caddy's admin API does not answer on $ADMIN_SOCKET; see $([ "$SYSTEMD" = 1 ] && echo 'journalctl -u caddy' || echo "$CADDY_LOG")"
  ok "Caddy's admin API answers on $ADMIN_SOCKET (group $BERTH_USER)"
}

# Caddy reloads by binding its ports anew; with net.ipv4.tcp_migrate_req=1 (Linux 5.14+)
# the connections queued on the old sockets move to the new ones instead of being reset.
step_migrate_req() {
  if [ ! -e "$MIGRATE_REQ" ]; then
    say "note: this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14+): a connection may be reset when berth reloads Caddy"
    return 0
  fi
  ensure_file "$SYSCTL_CONF" 0644 root:root "net.ipv4.tcp_migrate_req = 1" sysctl_conf \
    "connections survive Caddy's reloads, also after a reboot"
  was=$(cat "$MIGRATE_REQ")
  [ "$was" != 1 ] || return 0
  if [ ! -w "$MIGRATE_REQ" ]; then
    say "note: /proc/sys is read-only here (a container?): net.ipv4.tcp_migrate_req stays $was"
  elif change "set net.ipv4.tcp_migrate_req to 1 now (it was $was)"; then
    state_set migrate_req_was "$was"
    echo 1 >"$MIGRATE_REQ"
  fi
}

stop_recorded_caddy() {
  pid=$(state_get caddy_pid)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = caddy ]; then
    if change "stop the Caddy this script started (pid $pid)"; then
      kill "$pid" 2>/dev/null || true
      wait_for "not_running $pid" 10 || kill -9 "$pid" 2>/dev/null || true
    fi
  fi
}

not_running() {
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" != caddy ]
}

# COMMAND SECONDS: runs COMMAND every half second until it succeeds or time is up.
wait_for() {
  tries=$(($2 * 2))
  while [ "$tries" -gt 0 ]; do
    if $1; then return 0; fi
    sleep 0.5
    tries=$((tries - 1))
  done
  return 1
}

facts_json() {
  facts="\"arch\":\"$(json_escape "$ARCH")\""
  os=$(json_escape "$OS_NAME")
  if [ -n "$os" ] && [ "${#os}" -le 200 ]; then facts="$facts,\"os\":\"$os\""; fi
  cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo "")
  if is_number "$cpus" && [ "$cpus" -ge 1 ]; then facts="$facts,\"cpus\":$cpus"; fi
  kb=$(awk '$1 == "MemTotal:" { print $2; exit }' /proc/meminfo 2>/dev/null || echo "")
  if is_number "$kb" && [ "$kb" -ge 1 ]; then facts="$facts,\"memoryBytes\":$((kb * 1024))"; fi
  version=$(docker version --format '{{.Server.Version}}' </dev/null 2>/dev/null | head -n 1) || version=""
  case $version in
    '' | *[!0-9A-Za-z.+~-]*) ;;
    *) facts="$facts,\"dockerVersion\":\"$version\"" ;;
  esac
  printf '{%s}' "$facts"
}

step_enroll() {
  if [ "$NEEDS_ENROLLMENT" = 0 ]; then
    ok "enrolled with berth as server $SERVER_ID"
    return 0
  fi
  types=$(printf '%s' "$HOST_KEYS" | awk '{ print $1 }' | paste -sd, - | sed 's/,/, /g')
  change "register this server with berth: its SSH host keys ($types), SSH port $SSH_PORT and facts" ||
    return 0
  # The keys were checked in read_sshd: a type and base64, nothing to escape.
  keys=$(printf '%s' "$HOST_KEYS" | sed 's/.*/"&"/' | paste -sd, -)
  printf '{"hostKeys":[%s],"sshPort":%s,"facts":%s}' "$keys" "$SSH_PORT" "$(facts_json)" >"$WORK/enroll.json"
  code=$(api POST /api/agent/servers/enroll "$WORK/enroll.json")
  case $code in
    200) ;;
    401) die "berth refused the enrollment token: it was used or expired meanwhile. Add the server again in berth for a new one." ;;
    000) die "cannot reach berth at $BERTH_URL" ;;
    *) die "berth answered HTTP $code to the enrollment: $(head -c 600 "$WORK/response")" ;;
  esac
  public_key=$(json_field publicKey "$WORK/response")
  printf '%s\n' "$public_key" | grep -Eq '^ssh-ed25519 [A-Za-z0-9+/]+=* berth@[0-9a-f-]+$' ||
    die "berth's answer has no usable public key: $(head -c 300 "$WORK/response")"
  state_set server_id "$SERVER_ID"
  state_set base_url "$BERTH_URL"
  state_set host_key_file "$HOST_KEY_FILE"
  state_set token_sha256 "$(token_hash)"
  state_set authorized_key "$RESTRICTIONS $public_key"
  say "enrolled as server $SERVER_ID"
}

# The user's authorized_keys file as sshd reads it (AuthorizedKeysFile, %h %u %U expanded).
keys_file() {
  home=$(getent passwd "$BERTH_USER" | cut -d: -f6)
  uid=$(id -u "$BERTH_USER")
  esc_home=$(printf '%s' "$home" | sed -e 's/[\\|&]/\\&/g')
  file=$(printf '%s' "$KEYS_PATTERN" | sed -e "s|%h|$esc_home|g" -e "s|%u|$BERTH_USER|g" -e "s|%U|$uid|g")
  case $file in
    /*) printf '%s' "$file" ;;
    *) printf '%s/%s' "$home" "$file" ;;
  esac
}

step_authorize() {
  line=$(state_get authorized_key)
  if [ -z "$line" ] || ! id "$BERTH_USER" >/dev/null 2>&1; then
    [ "$DRY_RUN" = 1 ] || die "no key to authorize: enrollment did not happen"
    say "would authorize berth's key (from the enrollment) for $BERTH_USER, in the file sshd reads ($KEYS_PATTERN): $RESTRICTIONS <key>"
    return 0
  fi
  file=$(keys_file)
  if [ -f "$file" ] && grep -qxF -- "$line" "$file"; then
    ok "berth's key is authorized for $BERTH_USER in $file (forward only)"
    return 0
  fi
  change "authorize berth's key for $BERTH_USER in $file: $RESTRICTIONS (it can forward, it cannot run a command)" ||
    return 0
  state_set authorized_keys_file "$file"
  dir=$(dirname "$file")
  if [ ! -d "$dir" ]; then
    state_set created_keys_dir "$dir"
    mkdir -p "$dir"
    chown "$BERTH_USER:$BERTH_USER" "$dir"
    chmod 0700 "$dir"
  fi
  if [ ! -e "$file" ]; then
    state_set created_keys_file 1
    : >"$file"
    chown "$BERTH_USER:$BERTH_USER" "$file"
    chmod 0600 "$file"
  fi
  printf '%s\n' "$line" >>"$file"
}

step_wait() {
  if [ "$DRY_RUN" = 1 ]; then
    say "would wait up to $WAIT_SECONDS s until berth reports the server online"
    return 0
  fi
  [ "$WAIT_SECONDS" -gt 0 ] || return 0
  say "waiting up to $WAIT_SECONDS s for berth to reach this server over SSH (port $SSH_PORT)..."
  deadline=$(($(date +%s) + WAIT_SECONDS))
  status=""
  while :; do
    code=$(signed_api GET /api/agent/servers/self)
    if [ "$code" = 200 ]; then
      status=$(json_field status "$WORK/response")
      detail=$(json_field statusDetail "$WORK/response")
      if [ "$status" = online ]; then
        say "server $SERVER_ID is online: berth can deploy to it (POST /api/agent/docker/deploy with \"serverId\": \"$SERVER_ID\")."
        return 0
      fi
    fi
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 1
  done
  die "server $SERVER_ID is not online after $WAIT_SECONDS s (status: ${status:-unknown}${detail:+; $detail}). Check that berth reaches this server's port $SSH_PORT (a firewall, or NAT: then use --ssh-port, and set the address in berth), then run this command again."
}

install() {
  check_root
  check_plain_http
  check_os
  check_arch
  check_tools
  read_sshd
  check_sshd_block
  check_token
  if [ "$DRY_RUN" = 1 ]; then
    say "dry run: this is the plan for $OS_NAME ($ARCH) and berth at $BERTH_URL; nothing is changed"
  else
    say "setting up $OS_NAME ($ARCH) for berth at $BERTH_URL"
  fi
  step_sshd
  step_packages
  step_docker
  step_user
  step_caddy
  step_enroll
  step_authorize
  step_wait
  if [ "$CHANGES" = 0 ] && [ "$DRY_RUN" = 0 ]; then
    say "nothing to change: this server was already set up"
  fi
}

# -- uninstalling -----------------------------------------------------------------------

remove_line() {
  [ -f "$1" ] && grep -qxF -- "$2" "$1" || return 0
  change "remove berth's key from $1" || return 0
  tmp=$(mktemp "$1.XXXXXX")
  grep -vxF -- "$2" "$1" >"$tmp" || true
  chown "$(stat -c '%u:%g' "$1")" "$tmp"
  chmod "$(stat -c '%a' "$1")" "$tmp"
  mv "$tmp" "$1"
}

remove_file() {
  if [ -f "$1" ] && change "remove $1"; then rm -f "$1"; fi
}

remove_empty_dir() {
  if [ -d "$1" ] && [ -z "$(ls -A "$1")" ] && change "remove the empty directory $1"; then
    rmdir "$1"
  fi
}

uninstall() {
  check_root
  if [ ! -f "$STATE_FILE" ]; then
    say "nothing to uninstall: $STATE_FILE does not exist (this script did not set up this machine)"
    return 0
  fi
  if [ "${BERTH_SKIP_SERVICES:-0}" = 1 ] || [ ! -d /run/systemd/system ]; then SYSTEMD=0; else SYSTEMD=1; fi
  [ "$DRY_RUN" = 0 ] || say "dry run: this is the plan; nothing is changed"
  server_id=$(state_get server_id)

  # berth's access first: its key, so that berth stops connecting.
  file=$(state_get authorized_keys_file)
  if [ -n "$file" ]; then
    remove_line "$file" "$(state_get authorized_key)"
    if [ "$(state_get created_keys_file)" = 1 ] && [ -f "$file" ] && [ ! -s "$file" ]; then
      remove_file "$file"
    fi
  fi
  dir=$(state_get created_keys_dir)
  [ -z "$dir" ] || remove_empty_dir "$dir"
  TOLD=0
  [ -n "$SSHD_CONFIG" ] || SSHD_CONFIG=$(state_get sshd_config)
  tell_berth "$server_id"
  if id "$BERTH_USER" >/dev/null 2>&1; then end_sessions; fi
  remove_sshd_block

  # Caddy: back to its own configuration (or stopped, if this script installed it).
  if [ -n "$(state_get caddy_dropin)" ] || [ -n "$(state_get tmpfiles)" ]; then
    remove_file "$DROPIN"
    [ -z "$(state_get caddy_dropin_dir)" ] || remove_empty_dir "$DROPIN_DIR"
    remove_file "$TMPFILES"
    if [ "$SYSTEMD" = 1 ] && [ "$DRY_RUN" = 0 ]; then systemctl daemon-reload </dev/null; fi
    if [ "$SYSTEMD" = 1 ]; then
      case " $(state_get installed_packages) " in
        *" caddy "*)
          if change "stop and disable Caddy (this script installed it; the package stays)"; then
            systemctl disable --now caddy </dev/null || true
          fi
          ;;
        *)
          if change "restart Caddy with its own configuration (/etc/caddy/Caddyfile)"; then
            systemctl try-restart caddy </dev/null || true
          fi
          ;;
      esac
    fi
  fi
  stop_recorded_caddy
  remove_file "$CADDY_CONFIG"
  remove_empty_dir "$CONFIG_DIR"
  if [ -n "$(state_get run_dir)" ]; then
    if [ -S "$ADMIN_SOCKET" ] && change "remove $ADMIN_SOCKET"; then rm -f "$ADMIN_SOCKET"; fi
    remove_empty_dir "$RUN_DIR"
  fi
  [ -z "$(state_get caddy_log)" ] || remove_file "$CADDY_LOG"
  if [ -n "$(state_get sysctl_conf)" ]; then remove_file "$SYSCTL_CONF"; fi
  was=$(state_get migrate_req_was)
  if [ -n "$was" ] && [ -w "$MIGRATE_REQ" ] && change "set net.ipv4.tcp_migrate_req back to $was"; then
    echo "$was" >"$MIGRATE_REQ"
  fi
  if [ -n "$(state_get caddy_home)" ] && [ -d "$CADDY_HOME" ] && change "remove $CADDY_HOME (Caddy's saved copy of berth's configuration)"; then
    rm -rf "$CADDY_HOME"
  fi

  # Apps: they keep running, unless --purge.
  if [ "$PURGE" = 1 ]; then
    purge_apps "$server_id"
  else
    say "apps keep running; their containers and data stay (--purge removes them)"
  fi

  # The user, if this script created it; else only what it changed about it.
  if id "$BERTH_USER" >/dev/null 2>&1; then
    if [ "$(state_get created_user)" = 1 ]; then
      if pgrep -u "$BERTH_USER" >/dev/null 2>&1 && change "end the processes of $BERTH_USER (berth's SSH sessions)"; then
        pkill -u "$BERTH_USER" || true
        sleep 1
      fi
      if [ "$PURGE" = 1 ]; then
        if change "remove the user $BERTH_USER and its home"; then userdel --remove "$BERTH_USER" 2>/dev/null || userdel "$BERTH_USER"; fi
      elif change "remove the user $BERTH_USER (its home stays; --purge removes it)"; then
        userdel "$BERTH_USER"
      fi
    else
      if [ "$(state_get added_to_docker_group)" = 1 ] && change "remove $BERTH_USER from the group docker"; then
        gpasswd -d "$BERTH_USER" docker >/dev/null
      fi
      if [ "$(state_get unlocked_user)" = 1 ] && change "lock $BERTH_USER's password field again"; then
        usermod -L "$BERTH_USER"
      fi
    fi
  fi

  packages=$(state_get installed_packages)
  [ -z "$packages" ] || say "the packages this script installed stay ($packages): removing Docker would stop your apps. apt-get remove $packages removes them."
  if change "remove $STATE_FILE"; then rm -f "$STATE_FILE"; fi
  remove_empty_dir "$STATE_DIR"
  if [ "$TOLD" = 1 ]; then
    say "berth lists server $server_id as removed: delete it there to forget it."
  elif [ -n "$server_id" ]; then
    say "berth still lists server $server_id (now unreachable): remove it there too."
  fi
}

# The Match block for berth goes with berth's key (after it: the key could never listen),
# and sshd reloads, if its configuration without the block still passes sshd -t.
remove_sshd_block() {
  dropin=$(state_get sshd_dropin)
  [ -n "$dropin" ] && [ -f "$dropin" ] || return 0
  change "remove $dropin (sshd's Match block for $BERTH_USER) and reload sshd" || return 0
  rm -f "$dropin"
  dir=$(state_get sshd_dropin_dir)
  [ -z "$dir" ] || remove_empty_dir "$dir"
  SSHD=$(command -v sshd 2>/dev/null || echo /usr/sbin/sshd)
  SSHD_DROPIN=$dropin
  if [ -n "$SSHD_CONFIG" ]; then set -- -f "$SSHD_CONFIG"; else set --; fi
  if "$SSHD" -t "$@" </dev/null >/dev/null 2>&1; then
    reload_sshd
  else
    warn "sshd -t rejects sshd's configuration (not because of berth's block, now gone): sshd was not reloaded"
  fi
}

# SERVER_ID: tells berth (a request signed with this server's host key) that berth's key
# is gone, so that it drops its connection and marks the server removed. A failure is
# only a warning: the key is gone either way, and end_sessions closes the connection.
tell_berth() {
  SERVER_ID=$1
  [ -n "$SERVER_ID" ] || return 0
  [ "$BASE_URL_GIVEN" = 1 ] || BERTH_URL=$(state_get base_url)
  HOST_KEY_FILE=$(state_get host_key_file)
  if [ -z "$HOST_KEY_FILE" ] && [ -r /etc/ssh/ssh_host_ed25519_key ]; then
    HOST_KEY_FILE=/etc/ssh/ssh_host_ed25519_key
  fi
  [ -n "$BERTH_URL" ] || return 0
  change "tell berth at $BERTH_URL that server $SERVER_ID is uninstalled (it drops its connection and marks the server removed)" ||
    return 0
  code=$(signed_api POST /api/agent/servers/self/uninstall)
  case $code in
    200)
      TOLD=1
      ok "berth marked server $SERVER_ID removed"
      ;;
    000) warn "could not tell berth at $BERTH_URL ($(head -c 300 "$WORK/response")): it will find the server unreachable; remove it there" ;;
    *) warn "berth answered HTTP $code ($(head -c 300 "$WORK/response")): remove the server there" ;;
  esac
}

# berth's SSH sessions: the processes running as the user that the sshd berth's key is
# authorized for forked (sshd's per-connection children; sshd-session since OpenSSH
# 9.8), nothing else of the user's. Ending them closes berth's connection even when
# berth could not be told; its key being gone, it cannot come back.
end_sessions() {
  [ -z "$(sessions)" ] && return 0
  change "end $BERTH_USER's SSH sessions (berth's connection to this server): pids $(sessions | paste -sd' ' -)" ||
    return 0
  # shellcheck disable=SC2046 # one word per pid
  kill -TERM $(sessions) 2>/dev/null || true
  if ! wait_for no_sessions 5; then
    # shellcheck disable=SC2046 # one word per pid
    kill -KILL $(sessions) 2>/dev/null || true
  fi
}

no_sessions() {
  [ -z "$(sessions)" ]
}

# The pids of $BERTH_USER's sshd processes descending from the sshd whose PidFile is in
# `sshd -T` (the one this script configured berth's key for).
sessions() {
  master=$(sshd_pid)
  is_number "$master" || return 0
  for pid in $(pgrep -u "$BERTH_USER" -x 'sshd(-sess.*)?' 2>/dev/null); do
    up=$pid
    depth=0
    while is_number "$up" && [ "$up" -gt 1 ] && [ "$depth" -lt 5 ]; do
      up=$(awk '$1 == "PPid:" { print $2 }' "/proc/$up/status" 2>/dev/null) || up=""
      if [ "$up" = "$master" ]; then
        echo "$pid"
        break
      fi
      depth=$((depth + 1))
    done
  done
}

# SERVER_ID: removes the containers berth deployed as that server (label berth.server)
# and each one's data directory; any other container stays, berth's or not (another
# server's, berth's own machine's, or one deployed before berth labelled servers).
purge_apps() {
  if [ -z "$1" ]; then
    say "this machine never enrolled: no app of berth's to remove"
    return 0
  fi
  listing=$(docker ps -a --filter label=berth.managed=true --filter "label=berth.server=$1" \
    --format '{{.ID}} {{.Names}}' </dev/null 2>/dev/null) || listing=""
  ids=$(printf '%s\n' "$listing" | awk 'NF == 2 { print $1 }')
  if [ -n "$ids" ] && change "remove server $1's containers: $(printf '%s\n' "$listing" | awk 'NF == 2 { print $2 }' | paste -sd' ' -)"; then
    # shellcheck disable=SC2086 # one word per container id
    docker rm -f $ids </dev/null >/dev/null
  fi
  printf '%s\n' "$listing" | awk 'NF == 2 { print $2 }' | while IFS= read -r name; do
    case $name in
      '' | .* | *[!A-Za-z0-9_.-]*) continue ;;
    esac
    if [ -d "$APPS_DIR/$name" ] && change "remove $name's data in $APPS_DIR/$name"; then
      rm -rf "${APPS_DIR:?}/$name"
    fi
  done
  remove_empty_dir "$APPS_DIR"
  others=$(docker ps -aq --filter label=berth.managed=true </dev/null 2>/dev/null | wc -l) || others=0
  if [ "$DRY_RUN" = 0 ] && [ "$others" -gt 0 ]; then
    say "$others other container(s) of berth stay: not labelled as server $1's (docker ps -a --filter label=berth.managed=true)"
  fi
}

cleanup() {
  [ -z "$WORK" ] || rm -rf "$WORK"
}

main() {
  parse_args "$@"
  WORK=$(mktemp -d)
  trap cleanup EXIT
  trap 'exit 1' INT TERM HUP
  elevate "$@"
  if [ "$UNINSTALL" = 1 ]; then
    uninstall
  else
    install
  fi
}

main "$@"
