package runner

import "os"

// otherEndHeld is true: finish cuts off every copy still running at the end
// of its delay, as it always did here.
func otherEndHeld(*os.File) bool { return true }
