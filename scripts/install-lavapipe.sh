#!/usr/bin/env bash
# Installs Mesa's lavapipe (a Vulkan driver on the CPU) from bookworm-backports (Mesa 25: shaderFloat16)
# when the machine has no Vulkan ICD. Only acts on Debian as root; otherwise explains and exits 0 so a
# machine with a real GPU driver is left alone.
set -euo pipefail

have_icd() {
  compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null || compgen -G '/etc/vulkan/icd.d/*.json' >/dev/null
}
# Mesa older than 25 has lavapipe without shaderFloat16: upgrade it where we can.
mesa_major() {
  dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | sed -E 's/^([0-9]+:)?([0-9]+).*/\2/'
}

if have_icd && [ "${WGT_FORCE_LAVAPIPE_INSTALL:-0}" != 1 ]; then
  major=$(mesa_major || true)
  if [ -z "$major" ] || [ "$major" -ge 25 ] || [ ! -f /etc/debian_version ] || [ "$(id -u)" != 0 ]; then
    exit 0
  fi
fi
if [ ! -f /etc/debian_version ] || [ "$(id -u)" != 0 ]; then
  echo "install-lavapipe: no Vulkan driver found and this is not Debian as root;" >&2
  echo "install a Vulkan driver (e.g. mesa-vulkan-drivers) yourself." >&2
  exit 0
fi

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ -z "$codename" ]; then
  echo "install-lavapipe: cannot tell the Debian codename" >&2
  exit 1
fi

# Derive the backports source from the mirror the machine already uses (deb822 or one-line format).
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
  | grep -v '^\s*#' \
  | grep -oE 'https?://[^ ]+/debian/?( |$)' \
  | grep -v -- '-security' | head -n 1 | tr -d ' ' || true)
mirror=${mirror%/}
if [ -z "$mirror" ]; then
  echo "install-lavapipe: no Debian mirror found in the apt sources" >&2
  exit 1
fi
list=/etc/apt/sources.list.d/wgtensor-backports.list
if ! grep -rqs "${codename}-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb $mirror ${codename}-backports main" > "$list"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq -t "${codename}-backports" mesa-vulkan-drivers libvulkan1 \
  || apt-get install -y -qq mesa-vulkan-drivers libvulkan1
echo "install-lavapipe: installed $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers)"
