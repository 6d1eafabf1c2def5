import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("One stallTimeout and one diskReserve")
struct SharedSettingsTests {
    @Test("transfer's stallTimeout and diskReserve reach queue and placement; their old keys are refused")
    func oneSetting() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.appending("courier.json")
        try Data(#"{"transfer": {"stallTimeout": 7, "diskReserve": 4096}}"#.utf8).write(to: file)
        var configuration = try CourierConfiguration.load(file: file, required: true)
        #expect(configuration.transfer.stallTimeout == 7)
        #expect(configuration.queue.stallTimeout == 14)
        #expect(configuration.placement.diskReserve == 4096)
        configuration.transfer.diskReserve = 1
        #expect(configuration.placement.diskReserve == 1)
        #expect(CourierConfiguration().placement.diskReserve == TransferConfiguration().diskReserve)
        #expect(CourierConfiguration().queue.stallTimeout == 60)

        for old in [#"{"placement": {"diskReserve": 1}}"#, #"{"queue": {"stallTimeout": 1}}"#] {
            try Data(old.utf8).write(to: file)
            #expect { try CourierConfiguration.load(file: file, required: true) } throws: {
                ($0 as? CourierError)?.code == .usage
            }
        }
    }
}
