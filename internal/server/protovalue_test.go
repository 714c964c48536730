package server

import "google.golang.org/protobuf/reflect/protoreflect"

func protoValue(s string) protoreflect.Value { return protoreflect.ValueOfString(s) }
