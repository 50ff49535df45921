#!/bin/sh
# Installs the Command Line Tools on a Mac without a screen, as root (the discover step runs it
# with become when mlx_cluster_install_command_line_tools is true and /usr/bin/python3 is their
# stub). softwareupdate offers them only while this placeholder exists (what xcode-select
# --install creates before it asks at the screen); the newest non-beta label it lists is
# installed. Exit: 0 installed, 3 none offered (no network, or a Software Update server that
# lacks them), else softwareupdate's or xcode-select's own status.
set -u
placeholder=/tmp/.com.apple.dt.CommandLineTools.installondemand.in-progress
touch "$placeholder" || exit 1
trap 'rm -f "$placeholder"' EXIT
listing=$(softwareupdate --list 2>&1)
label=$(printf '%s\n' "$listing" \
  | grep -E '^[[:space:]]*\*.*Command Line Tools' \
  | sed -e 's/^[[:space:]]*\*[[:space:]]*//' -e 's/^Label:[[:space:]]*//' \
  | grep -iv beta \
  | sort -V \
  | tail -n 1)
if [ -z "$label" ]; then
  echo "softwareupdate offers no Command Line Tools here (softwareupdate --list said: $listing)"
  exit 3
fi
echo "installing: $label"
softwareupdate --install "$label" || exit $?
# the tools are in place when xcode-select finds them
xcode-select -p
