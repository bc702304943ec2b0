// Package rankpb holds the protobuf messages that cross processes between
// the engine and its remote rank actors (see rank.proto and docs/remote.md).
// rank.pb.go is generated and committed; `make proto` regenerates it.
package rankpb
