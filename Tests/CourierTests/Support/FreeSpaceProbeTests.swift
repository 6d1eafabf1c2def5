import Courier
import CourierTestSupport
import Foundation
import Testing

@Suite("FreeSpaceProbe")
struct FreeSpaceProbeTests {
    @Test("statvfs reads a folder, and the folder of a file not created yet")
    func statvfs() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let folder = try FreeSpaceProbe.statvfs.available(directory.url)
        #expect(folder > 0)
        let missing = try FreeSpaceProbe.statvfs.available(directory.url.appendingPathComponent("download.part"))
        #expect(missing > 0)
        #expect(throws: CourierError.self) {
            try FreeSpaceProbe.statvfs.available(directory.url.appendingPathComponent("no/such/folder"))
        }
    }
}
