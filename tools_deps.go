//go:build tools

package tools

import (
	_ "github.com/google/go-containerregistry/pkg/v1/tarball"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/remotecommand"
)
