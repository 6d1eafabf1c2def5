import Courier
import Testing

@Suite("Backoff")
struct BackoffTests {
    @Test("doubles from the first retry, caps, and jitters only when asked")
    func schedule() {
        let plain = Backoff(initial: 2, maximum: 300, jitter: false)
        #expect((1...5).map { plain.delay(attempt: $0) } == [2, 4, 8, 16, 32])
        #expect(plain.delay(attempt: 40) == 300)
        #expect(plain.delay(attempt: Int.max) == 300)
        #expect(plain.delay(attempt: 0) == 2)
        let jittered = Backoff(initial: 1, maximum: 30)
        #expect(jittered.delay(attempt: 2, random: 0) == 1)
        #expect(jittered.delay(attempt: 2, random: 1) == 2)
        #expect(jittered.delay(attempt: 1, retryAfter: -5) == 0)
    }
}
