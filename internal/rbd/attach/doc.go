// Package attach makes an RBD image a local block device, one Attacher per way of doing it:
//
//   - krbd: the kernel RBD client (`rbd device map`), needs the rbd kernel module;
//   - rbd-nbd: librbd in a user-space daemon behind /dev/nbdN, needs the nbd module;
//   - fuse: this process serves the image as a file over FUSE (librbd, package fusefile),
//     losetup turns that file into /dev/loopN. It needs only FUSE and loop devices, so it works
//     on hosts (and CI machines) that have neither kernel module; its FUSE connections outlive
//     a restart of the process serving them (see Fuse).
//
// Every external command runs through a hostexec.Executor with a timeout. Credentials never
// appear on a command line: for krbd and rbd-nbd the cephx key goes into a 0600 key file that
// is removed as soon as the tool has authenticated; fuse hands it to librados in this process.
// Nothing here knows about CSI.
package attach
