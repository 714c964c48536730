// Package hostmount finds, makes and removes mounts on the node: the topmost mount at a path
// from the kernel's mount table, bind mounts, unmounts of stacked mounts, and a stat that gives
// up on a FUSE mount whose daemon does not answer.
package hostmount
