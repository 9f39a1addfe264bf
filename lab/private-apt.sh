# Sourced by the scripts that fetch packages from another Debian suite (sid's kernel, UML,
# OpenVPN, rustc) without installing them: nothing in /etc/apt or dpkg's database changes.
#
# private_apt WORK SUITE [-o OPTION ...]
#   Sets apt_opts: apt-get and apt-cache options confined to WORK (its own source list,
#   package lists and cache, plus the options given), and found: the first of this
#   machine's mirrors (lab/debian-mirrors.sh) that serves SUITE signed by Debian's archive
#   key, whose lists are then in WORK. Returns 3 saying why where none does. A caller that
#   wants them local declares `local apt_opts found` first.

private_apt_lab=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

private_apt() {
    local work=$1 suite=$2 who keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    shift 2
    who="lab/$(basename "$0")"
    [ -f "$keyring" ] || { echo "$who: $keyring missing (apt-get install debian-archive-keyring)" >&2; return 3; }
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root "$@")
    local mirrors mirror said=""
    mirrors=$(bash "$private_apt_lab/debian-mirrors.sh") || return 3
    found=""
    for mirror in $mirrors; do
        echo "deb [signed-by=$keyring] $mirror $suite main" > "$work/sources.list"
        if said=$(apt-get -qq "${apt_opts[@]}" update 2>&1); then
            found=$mirror
            return 0
        fi
        echo "$who: $mirror serves no $suite signed by Debian's archive key"
    done
    echo "$who: no mirror of apt's sources ($(echo $mirrors)) serves $suite: $said" >&2
    return 3
}
