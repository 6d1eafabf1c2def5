import Courier
import Foundation
import Testing

@Suite("RetryPolicy")
struct RetryPolicyTests {
    @Test("doubles from the first retry, caps, and jitters only when asked")
    func schedule() {
        let plain = RetryPolicy(maxRetries: 5, backoffBase: 2, backoffMax: 300, jitter: false)
        #expect((1...5).map { plain.delay(retry: $0) } == [2, 4, 8, 16, 32])
        #expect(plain.delay(retry: 40) == 300)
        #expect(plain.delay(retry: Int.max) == 300)
        #expect(plain.delay(retry: 0) == 2)
        let jittered = RetryPolicy(maxRetries: 5, backoffBase: 1, backoffMax: 30)
        #expect(jittered.delay(retry: 2, random: 0) == 1)
        #expect(jittered.delay(retry: 2, random: 1) == 2)
        #expect(jittered.delay(retry: 1, retryAfter: -5) == 0)
        #expect(jittered.delay(retry: 1, retryAfter: 1e9) == 30)
        #expect(jittered.delay(retry: 1, retryAfter: .nan) == 30)
    }

    @Test("counts retries against the limit; no limit keeps retrying")
    func limit() {
        let three = RetryPolicy(maxRetries: 3, backoffBase: 1, backoffMax: 8)
        #expect([1, 2, 3, 4].map(three.allows(retry:)) == [true, true, true, false])
        let none = RetryPolicy(maxRetries: 0, backoffBase: 1, backoffMax: 8)
        #expect(!none.allows(retry: 1))
        let forever = RetryPolicy(maxRetries: nil, backoffBase: 1, backoffMax: 8)
        #expect(forever.allows(retry: 1_000_000))
    }

    @Test("the transfer configuration holds the transfers' policy")
    func fromConfiguration() throws {
        let configuration = try CourierConfiguration.decode(
            Data(#"{"transfer": {"maxRetries": 2, "initialBackoff": 0.25, "maxBackoff": 4, "jitter": false}}"#.utf8))
        #expect(configuration.transfer.retryPolicy == RetryPolicy(maxRetries: 2, backoffBase: 0.25, backoffMax: 4, jitter: false))
        #expect(TransferConfiguration().retryPolicy == RetryPolicy(maxRetries: 5, backoffBase: 0.5, backoffMax: 30, jitter: true))
    }
}
