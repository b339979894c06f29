package atomicbucket_test

import (
	"fmt"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// A global limit: 10 requests per second in bursts of up to 5.
func ExampleBucket() {
	rule, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 5})
	if err != nil {
		panic(err)
	}
	b := atomicbucket.NewBucketAt(rule, 0)
	for i := range 6 {
		d := b.AllowNAt(0, 1) // explicit time: the package epoch
		fmt.Printf("request %d: allowed=%v remaining=%d retry-after=%v\n", i+1, d.Allowed, d.Remaining, d.RetryAfter)
	}
	fmt.Println("250ms later:", b.AllowNAt(atomicbucket.Time(0).Add(250*time.Millisecond), 2).Allowed)
	// Output:
	// request 1: allowed=true remaining=4 retry-after=0s
	// request 2: allowed=true remaining=3 retry-after=0s
	// request 3: allowed=true remaining=2 retry-after=0s
	// request 4: allowed=true remaining=1 retry-after=0s
	// request 5: allowed=true remaining=0 retry-after=0s
	// request 6: allowed=false remaining=0 retry-after=100ms
	// 250ms later: true
}

// Per-user limits in a table capped at 10,000 users, idle users swept.
func ExampleTable() {
	rule := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 100, Period: time.Minute, Burst: 20})
	users := atomicbucket.NewTable[int64](rule, atomicbucket.TableOptions{MaxKeys: 10_000})
	d := users.AllowNAt(42, 0, 5)
	fmt.Println(d.Allowed, d.Remaining, d.Reset)
	fmt.Println("users tracked:", users.Len())
	fmt.Println("swept a minute later:", users.SweepAt(atomicbucket.Time(0).Add(time.Minute)))
	// Output:
	// true 15 3s
	// users tracked: 1
	// swept a minute later: 1
}

// Interval refill: 5 tokens at each 10-second boundary, as in a fixed quota.
func ExampleLimit_interval() {
	rule := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 20, Refill: atomicbucket.Interval})
	b := atomicbucket.NewBucketAt(rule, 0)
	fmt.Println(b.AllowNAt(atomicbucket.Time(0).Add(15*time.Second), 18))
	fmt.Println(b.AllowNAt(atomicbucket.Time(0).Add(20*time.Second), 8))
	// Output:
	// {0s 35s 2 true}
	// {10s 30s 7 false}
}

// A rate that 64-bit fixed point cannot hold to one part in a million is refused.
func ExampleNewRule_inexact() {
	_, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: 999_999, Period: time.Second, Burst: 10})
	fmt.Println(err != nil)
	r := atomicbucket.MustRule(atomicbucket.Limit{Tokens: 31, Period: time.Second, Burst: 10})
	fmt.Println(r.Exact(), r.RelativeError() < atomicbucket.MaxRelativeError)
	// Output:
	// true
	// false true
}
