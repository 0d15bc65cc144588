// Package controllerapi is the REST API of sluice-controller, the operators'
// controller of a fleet of sluiced hosts: its types, its net/http server
// interface and its client.
//
// openapi.yaml (OpenAPI 3.1) is the source of truth. controllerapi.gen.go is
// generated from it by oapi-codegen, pinned as a tool dependency in go.mod:
//
//	go generate ./api/controllerapi   (or: make generate)
//
// TestGeneratedCodeIsCurrent fails when the checked-in code is not what the
// spec makes. Never edit controllerapi.gen.go by hand.
package controllerapi

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml
