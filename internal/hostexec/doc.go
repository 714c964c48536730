// Package hostexec runs host commands for the node services (mount helpers, ceph-fuse, losetup,
// mkfs...) with a timeout, without Ceph's environment variables and with secrets kept out of
// their output, and writes the short-lived 0600 key files those commands read.
package hostexec
