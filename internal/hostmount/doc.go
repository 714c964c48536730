// Package hostmount finds, makes and removes mounts on the node: the topmost mount at a path
// from the kernel's mount table, bind mounts, unmounts of stacked mounts, and stat, statfs and
// getxattr calls that give up on a FUSE mount whose daemon does not answer, one call per path.
package hostmount
