// Command protogen regenerates the protobuf code of proto/ (make generate):
// it compiles proto/automator/v1/automator.proto with protocompile (the
// compiler buf is built on) and runs the pinned protoc plugins on it, found
// on PATH, as protoc or buf would, writing what they make under -out.
//
// Only our own proto is generated; the vendored googleapis files under
// proto/third_party are imports whose Go code comes from genproto.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/protoutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// source is the file generated from, under importPaths[0].
const source = "automator/v1/automator.proto"

var importPaths = []string{"proto", "proto/third_party"}

// plugins run in this order; out is under -out.
var plugins = []struct {
	name, out string
	opts      []string
}{
	{"protoc-gen-go", ".", []string{"paths=source_relative"}},
	{"protoc-gen-go-grpc", ".", []string{"paths=source_relative"}},
	// The HTTP/JSON gateway goes into a package of its own (standalone),
	// so the proxy, which imports proto/automator/v1, does not link it.
	{"protoc-gen-grpc-gateway", "gateway", []string{"paths=source_relative", "standalone=true"}},
	// The OpenAPI document sits beside the gateway, which embeds and
	// serves it.
	{"protoc-gen-openapiv2", "gateway", []string{"json_names_for_fields=false", "openapi_configuration=proto/automator/v1/openapi.yaml"}},
}

func main() {
	out := flag.String("out", "proto", "directory to write the generated files under")
	flag.Parse()
	if err := generate(*out); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func generate(out string) error {
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: importPaths}),
		// Comments reach the generated code.
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := c.Compile(context.Background(), source)
	if err != nil {
		return err
	}
	// Every file the source needs, each after its own imports.
	var all []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		all = append(all, protoutil.ProtoFromFileDescriptor(f))
	}
	for _, f := range files {
		add(f)
	}
	for _, p := range plugins {
		req := &pluginpb.CodeGeneratorRequest{
			FileToGenerate: []string{source},
			Parameter:      proto.String(strings.Join(p.opts, ",")),
			ProtoFile:      all,
		}
		for _, f := range all {
			if f.GetName() == source {
				req.SourceFileDescriptors = append(req.SourceFileDescriptors, f)
			}
		}
		if err := run(p.name, req, filepath.Join(out, p.out)); err != nil {
			return err
		}
	}
	return nil
}

// run runs plugin on req and writes the files it answers under dir.
func run(plugin string, req *pluginpb.CodeGeneratorRequest, dir string) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	cmd := exec.Command(plugin)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w", plugin, err)
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return fmt.Errorf("%s: its answer: %w", plugin, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %s", plugin, resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("%s: insertion points are not supported (%s)", plugin, f.GetName())
		}
		path := filepath.Join(dir, filepath.FromSlash(f.GetName()))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
