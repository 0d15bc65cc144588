// Package systemd holds the systemd units of sluiced and sluice-controller
// (deploy/install.sh installs them). Its tests check the units with
// systemd-analyze verify, the deploy scripts with bash -n, and that
// install.sh installs everything and keeps the settings when run again.
package systemd
