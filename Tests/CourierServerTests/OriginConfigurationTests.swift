import CourierServer
import Foundation
import Testing

@Suite("OriginConfiguration")
struct OriginConfigurationTests {
    @Test("listens on loopback by default")
    func loopbackDefault() {
        let configuration = OriginConfiguration(contentDirectory: URL(fileURLWithPath: "/tmp"))
        #expect(configuration.host == "127.0.0.1")
    }
}
