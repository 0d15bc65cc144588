package deps
import (
 _ "golang.org/x/sys/unix"
 _ "github.com/spf13/cobra"
 _ "github.com/onsi/ginkgo/v2"
 _ "github.com/onsi/gomega"
)

