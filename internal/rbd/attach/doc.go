// Package attach makes an RBD image a local block device, one Attacher per way of doing it:
//
//   - krbd: the kernel RBD client (`rbd device map`), needs the rbd kernel module;
//   - rbd-nbd: librbd in a user-space daemon behind /dev/nbdN, needs the nbd module;
//   - fuse: rbd-fuse exposes the image as a file, losetup turns that file into /dev/loopN. It
//     needs only FUSE and loop devices, so it works on hosts (and CI machines) that have neither
//     kernel module.
//
// Every external command runs through a hostexec.Executor with a timeout. Credentials never appear on a
// command line: the cephx key goes into a 0600 key file that is removed as soon as the tool has
// authenticated. Nothing here knows about CSI.
package attach
