package crypto_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opsgate/opsgate/crypto"
)

func Example() {
	// The automator and the proxy share the account key; in practice the
	// proxy receives it as key.String() and calls crypto.ParseKey.
	key, err := crypto.NewKey(1)
	if err != nil {
		panic(err)
	}

	// Automator: seal a command for account "acme", work item "w-1".
	blob, err := crypto.Seal(key, "acme", "w-1", crypto.DirCommand, []byte("uptime"))
	if err != nil {
		panic(err)
	}

	// Proxy: open it with whatever key versions it holds.
	ring := crypto.Keys{key}
	cmd, err := crypto.Open(ring, "acme", "w-1", crypto.DirCommand, blob)
	fmt.Printf("command %q, err %v\n", cmd, err)

	// The same blob replayed into another account does not open.
	_, err = crypto.Open(ring, "globex", "w-1", crypto.DirCommand, blob)
	fmt.Println("replay rejected:", errors.Is(err, crypto.ErrOpen))

	// Proxy: seal the result, which only opens as a result.
	res, _ := crypto.Seal(key, "acme", "w-1", crypto.DirResult, []byte("up 3 days"))
	out, err := crypto.Open(ring, "acme", "w-1", crypto.DirResult, res)
	fmt.Printf("result %q, err %v\n", out, err)
	// Output:
	// command "uptime", err <nil>
	// replay rejected: true
	// result "up 3 days", err <nil>
}

func ExampleNewToken() {
	tok, err := crypto.NewToken("tok_")
	if err != nil {
		panic(err)
	}
	// Hand tok to the client once; store only its hash.
	stored := crypto.HashToken(tok)

	fmt.Println(strings.HasPrefix(tok, "tok_"), len(tok), len(stored))
	fmt.Println("valid:", crypto.TokenEqual(stored, crypto.HashToken(tok)))
	fmt.Println("forged:", crypto.TokenEqual(stored, crypto.HashToken("tok_guess")))
	// Output:
	// true 47 32
	// valid: true
	// forged: false
}
